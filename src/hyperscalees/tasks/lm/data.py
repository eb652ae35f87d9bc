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
  Only the first ``max_bytes`` are read (never the whole file first), and ``info["note"]`` says
  so when the file is longer; a file that would not fit in memory (the ids are int64 tensors,
  ~17 bytes of memory per byte of data while splitting) is refused up front, naming
  ``--max-bytes``. A device or pipe is read only with a ``max_bytes`` cap.
* a directory holding d-eggs' token format: ``input.bin`` (uint32 little-endian ids, no
  header) and ``decoding.bin`` (u32 vocab size, then per id a u32 length and that many bytes
  of the token's text). Every id is checked against the vocabulary; bits per byte use the
  byte length of each target token.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sysconfig
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .vocabulary import BYTE_PIECES, BYTES, Vocabulary

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

    @property
    def vocabulary(self) -> Vocabulary:
        """How its ids map to bytes (what a trained model needs of the data, saved with every checkpoint)."""
        return BYTES if self.is_bytes else Vocabulary(tuple(self.pieces), is_bytes=False)

    def token_bytes(self) -> Tensor:
        """(V,) byte length of every token (1 for byte data)."""
        return self.vocabulary.token_bytes()

    def decode(self, ids) -> str:
        return self.vocabulary.decode(ids)

    def encode(self, text: str) -> list[int]:
        """Bytes for byte data; for token data, greedy longest match over the vocabulary's pieces."""
        try:
            return self.vocabulary.encode(text)
        except ValueError as e:
            raise DataError(str(e)) from None


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
    data, note = read_byte_file(p, max_bytes)
    info = {"source": str(p), "format": "bytes"} | ({"note": note} if note else {})
    return split_stream(torch.from_numpy(data.astype(np.int64)), val_fraction, 256, BYTE_PIECES, info, test_fraction)


BYTES_PER_TOKEN = 17  # memory per byte of data while loading: the bytes, their int64 ids, and the split's copies


def available_memory() -> int | None:
    """Bytes of physical memory free now (None where the platform does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(path: Path, n: int, per_item: int = BYTES_PER_TOKEN) -> None:
    """Refuse, naming --max-bytes, data whose tensors would not fit in the memory free now."""
    free = available_memory()
    if free is not None and n * per_item > free:
        cap = max(1, free // (2 * per_item))
        raise DataError(f"--data {str(path)!r}: loading its {n:,} tokens needs about {n * per_item / 2**30:.1f} GiB "
                        f"of memory, more than the {free / 2**30:.1f} GiB free; read part of it with --max-bytes "
                        f"(e.g. --max-bytes {cap})")


def read_byte_file(path: Path, max_bytes: int) -> tuple[np.ndarray, str | None]:
    """(the first ``max_bytes`` bytes of ``path``, or all of it if 0; a note when that is not all of it)."""
    try:
        st = path.stat()
    except OSError as e:
        raise DataError(f"cannot read --data {str(path)!r}: {e.strerror or e}") from None
    regular = stat.S_ISREG(st.st_mode)
    if not regular and not max_bytes:
        raise DataError(f"--data {str(path)!r} is not a regular file (a device or pipe has no length): give "
                        "--max-bytes N to read its first N bytes")
    n = min(st.st_size, max_bytes) if regular and max_bytes else (st.st_size if regular else max_bytes)
    check_fits(path, n)
    try:
        with open(path, "rb") as f:
            raw = f.read(n) if regular else _read_exactly(f, n)
    except OSError as e:
        raise DataError(f"cannot read --data {str(path)!r}: {e.strerror or e}") from None
    note = None
    if regular and st.st_size > len(raw):
        note = (f"--data {str(path)!r}: using its first {len(raw):,} of {st.st_size:,} bytes (--max-bytes "
                f"{max_bytes}; --max-bytes 0 reads all of it)")
    return np.frombuffer(raw, dtype=np.uint8), note


def _read_exactly(f, n: int) -> bytes:
    """Up to ``n`` bytes of a stream that may return less per read (a pipe)."""
    parts, got = [], 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


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
    check_fits(inp, size // 4, per_item=4 + BYTES_PER_TOKEN)
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
