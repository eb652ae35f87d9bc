"""Language-model pretraining: byte or token data, bits-per-byte metrics and baselines, generation."""
from .data import Corpus, DataError, load_corpus
from .task import LMOptions, LMTask

__all__ = ["Corpus", "DataError", "LMOptions", "LMTask", "load_corpus"]
