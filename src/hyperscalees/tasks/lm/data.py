"""Language-model data: train, validation and test streams of token ids, and how tokens map to bytes.

Three splits: **train** (fitness), **validation** (the evaluations during a run: what settings are
tuned on) and **test** (scored once, at the end of a run, over the whole split: the figure to report;
nothing should ever be tuned on it).

Three sources, chosen by ``--data``:

* nothing (default): the Python standard library's own source (``*.py`` under
  ``sysconfig.get_paths()["stdlib"]``, test suites and site-packages skipped), present on
  every machine that runs this package, so nothing is downloaded. Files are read in sorted
  order until ``max_bytes``; each is one document ``[0] + bytes`` (byte 0 is the document
  separator EGG resets its state on). The split is **by file**: with ``c = crc32(relative
  path) % 1000``, a file goes to validation when ``c < 1000·val_fraction``, to test when
  ``1000·val_fraction <= c < 1000·(val_fraction + test_fraction)``, else to train, so the same
  file lands on the same side on every machine and for every cap; the split is recorded in the run.
* a file: any text or binary file read as bytes (vocabulary 256); the last ``test_fraction``
  of it is the test stream, the ``val_fraction`` before that the validation stream.
* a directory holding d-eggs' token format: ``input.bin`` (uint32 little-endian ids, no
  header) and ``decoding.bin`` (u32 vocab size, then per id a u32 length and that many bytes
  of the token's text). Every id is checked against the vocabulary; bits per byte use the
  byte length of each target token.
"""
from __future__ import annotations

import hashlib
import os
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})
SEPARATOR = 0  # byte that starts every document of the default corpus


class DataError(ValueError):
    """Data that cannot be trained on (empty, ids outside the vocabulary, too short for a window)."""


@dataclass(frozen=True)
class Corpus:
    """Token streams plus what is needed to turn tokens back into bytes.

    ``train``/``val``/``test`` are 1-D int64 id tensors; ``pieces[i]`` is the bytes of token i (the
    256 single bytes for byte data); ``info`` describes the source and the split (JSON-able).
    """

    train: Tensor
    val: Tensor
    vocab_size: int
    pieces: tuple[bytes, ...]
    info: dict = field(default_factory=dict)
    test: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))

    @property
    def is_bytes(self) -> bool:
        return self.vocab_size == 256 and self.info.get("format") != "tokens"

    def token_bytes(self) -> Tensor:
        """(V,) byte length of every token (1 for byte data)."""
        return torch.tensor([len(p) for p in self.pieces], dtype=torch.float64)

    def decode(self, ids) -> str:
        return b"".join(self.pieces[int(i)] for i in ids).decode("utf-8", errors="replace")

    def encode(self, text: str) -> list[int]:
        """Bytes for byte data; for token data, greedy longest match over the vocabulary's pieces."""
        raw = text.encode("utf-8")
        if self.is_bytes:
            return list(raw)
        index: dict[bytes, int] = {}
        for i, p in enumerate(self.pieces):
            if p and p not in index:
                index[p] = i
        longest = max((len(p) for p in index), default=1)
        ids, i = [], 0
        while i < len(raw):
            for n in range(min(longest, len(raw) - i), 0, -1):
                if raw[i:i + n] in index:
                    ids.append(index[raw[i:i + n]])
                    i += n
                    break
            else:
                raise DataError(f"the prompt byte {raw[i]!r} at offset {i} has no token in the vocabulary")
        return ids


BYTE_PIECES = tuple(bytes([b]) for b in range(256))


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    if not 0 < val_fraction < 1 or not 0 < test_fraction < 1 or val_fraction + test_fraction >= 1:
        raise DataError(f"val_fraction and test_fraction must be in (0, 1) with a sum below 1, "
                        f"got {val_fraction!r} and {test_fraction!r}")


def load_corpus(path: str | None = None, val_fraction: float = 0.05, max_bytes: int = 4 << 20,
                test_fraction: float = 0.05) -> Corpus:
    """The corpus ``--data`` names (None: the standard library source); see the module docstring."""
    check_fractions(val_fraction, test_fraction)
    if path is None or path == "":
        return stdlib_corpus(val_fraction, max_bytes, test_fraction=test_fraction)
    p = Path(path)
    if p.is_dir():
        return token_corpus(p, val_fraction, test_fraction)
    if not p.exists():
        raise DataError(f"data path {str(p)!r} does not exist")
    data = np.fromfile(p, dtype=np.uint8)
    if max_bytes:
        data = data[:max_bytes]
    return split_stream(torch.from_numpy(data.astype(np.int64)), val_fraction, 256, BYTE_PIECES,
                        {"source": str(p), "format": "bytes"}, test_fraction)


def split_stream(ids: Tensor, val_fraction: float, vocab: int, pieces, info: dict,
                 test_fraction: float = 0.05) -> Corpus:
    """One stream: train, then ``val_fraction`` validation, then the last ``test_fraction`` test
    (each part needs two tokens)."""
    n = ids.numel()
    if n == 0:
        raise DataError(f"the data in {info['source']!r} is empty")
    n_test = int(round(n * test_fraction))
    n_val = int(round(n * val_fraction))
    n_train = n - n_val - n_test
    if min(n_val, n_test, n_train) < 2:
        raise DataError(f"the data in {info['source']!r} has {n} tokens: too few to split into train, "
                        f"validation and test with val_fraction {val_fraction} and test_fraction {test_fraction}")
    info = {**info, "split": f"train, then {val_fraction:g} validation, then the last {test_fraction:g} test",
            "train_tokens": n_train, "val_tokens": n_val, "test_tokens": n_test,
            "sha256": hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]}
    return Corpus(ids[:n_train].clone(), ids[n_train:n_train + n_val].clone(), vocab, tuple(pieces), info,
                  test=ids[n_train + n_val:].clone())


def stdlib_files(root: str | None = None) -> list[tuple[str, Path]]:
    """(relative posix path, path) of the standard library's ``*.py`` files, sorted."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in sorted(filenames):
            if f.endswith(".py"):
                full = Path(dirpath) / f
                out.append((full.relative_to(base).as_posix(), full))
    return sorted(out)


def file_split(rel: str, val_fraction: float, test_fraction: float = 0.05) -> str:
    """"val", "test" or "train": where the file at relative path ``rel`` goes (module docstring)."""
    c = zlib.crc32(rel.encode()) % 1000
    if c < round(1000 * val_fraction):
        return "val"
    return "test" if c < round(1000 * (val_fraction + test_fraction)) else "train"


def is_validation_file(rel: str, val_fraction: float) -> bool:
    return file_split(rel, val_fraction) == "val"


def stdlib_corpus(val_fraction: float = 0.05, max_bytes: int = 4 << 20, root: str | None = None,
                  test_fraction: float = 0.05) -> Corpus:
    """The standard library's source as three byte streams, split by file (module docstring)."""
    check_fractions(val_fraction, test_fraction)
    files = stdlib_files(root)
    if not files:
        raise DataError(f"no *.py files found under {root or sysconfig.get_paths()['stdlib']!r}")
    docs: dict[str, list[bytes]] = {"train": [], "val": [], "test": []}
    names: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    total = 0
    for rel, full in files:
        if max_bytes and total >= max_bytes:
            break
        try:
            doc = bytes([SEPARATOR]) + full.read_bytes()
        except OSError:  # unreadable file: skipped, it is not part of the corpus
            continue
        total += len(doc)
        side = file_split(rel, val_fraction, test_fraction)
        docs[side].append(doc)
        names[side].append(rel)
    tr, va, te = (b"".join(docs[k]) for k in ("train", "val", "test"))
    if min(len(tr), len(va), len(te)) < 2:
        raise DataError(f"the standard library corpus split has {len(tr)} train, {len(va)} validation and "
                        f"{len(te)} test bytes; raise max_bytes, val_fraction or test_fraction")
    v, t = round(1000 * val_fraction), round(1000 * (val_fraction + test_fraction))
    info = {"source": "python-stdlib", "root": str(root or sysconfig.get_paths()["stdlib"]), "format": "bytes",
            "split": f"by file: crc32(path) % 1000 < {v} validation, < {t} test, else train",
            "train_files": len(names["train"]), "val_files": names["val"], "test_files": names["test"],
            "train_tokens": len(tr), "val_tokens": len(va), "test_tokens": len(te),
            "sha256": hashlib.sha256(tr + b"|" + va + b"|" + te).hexdigest()[:16]}
    as_ids = lambda b: torch.from_numpy(np.frombuffer(b, dtype=np.uint8).astype(np.int64))  # noqa: E731
    return Corpus(as_ids(tr), as_ids(va), 256, BYTE_PIECES, info, test=as_ids(te))


def read_vocabulary(path: Path) -> tuple[bytes, ...]:
    """d-eggs' ``decoding.bin``: u32 count, then per id a u32 length and the piece's bytes."""
    raw = path.read_bytes()
    if len(raw) < 4:
        raise DataError(f"{str(path)!r} is too short to hold a vocabulary ({len(raw)} bytes)")
    count, off, pieces = int.from_bytes(raw[:4], "little"), 4, []
    for i in range(count):
        if off + 4 > len(raw):
            raise DataError(f"{str(path)!r} ends inside the entry of token {i} of {count}")
        n = int.from_bytes(raw[off:off + 4], "little")
        if off + 4 + n > len(raw):
            raise DataError(f"{str(path)!r}: token {i} claims {n} bytes past the end of the file")
        pieces.append(raw[off + 4:off + 4 + n])
        off += 4 + n
    if count < 2:
        raise DataError(f"{str(path)!r} declares a vocabulary of {count} tokens; need at least 2")
    return tuple(pieces)


def token_corpus(directory: Path, val_fraction: float, test_fraction: float = 0.05) -> Corpus:
    """``input.bin`` + ``decoding.bin`` of d-eggs, ids checked against the vocabulary."""
    inp, dec = directory / "input.bin", directory / "decoding.bin"
    for f in (inp, dec):
        if not f.is_file():
            raise DataError(f"token data directory {str(directory)!r} has no {f.name}")
    pieces = read_vocabulary(dec)
    size = inp.stat().st_size
    if size == 0:
        raise DataError(f"{str(inp)!r} is empty")
    if size % 4:
        raise DataError(f"{str(inp)!r} has {size} bytes, not a whole number of uint32 token ids")
    ids = np.fromfile(inp, dtype="<u4")
    bad = np.nonzero(ids >= len(pieces))[0]
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{str(inp)!r}: token id {int(ids[i])} at position {i} is >= the vocabulary size "
                        f"{len(pieces)} of {dec.name} ({bad.size} such ids)")
    return split_stream(torch.from_numpy(ids.astype(np.int64)), val_fraction, len(pieces), pieces,
                        {"source": str(directory), "format": "tokens"}, test_fraction)


def write_token_data(directory: str | Path, ids, pieces) -> None:
    """Write ``input.bin``/``decoding.bin`` in d-eggs' format (for tests and converters)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    np.asarray(ids, dtype="<u4").tofile(d / "input.bin")
    out = bytearray(len(pieces).to_bytes(4, "little"))
    for p in pieces:
        out += len(p).to_bytes(4, "little") + p
    (d / "decoding.bin").write_bytes(bytes(out))
