"""How token ids map to bytes: what a trained language model needs, besides its weights, to read and write text.

Every lm checkpoint keeps its vocabulary in the task state (:meth:`Vocabulary.to_state`), so
``hyperscalees generate DIR`` builds the model and turns text into ids and back from the run
directory alone: from any working directory, without the training data (which may have moved).

Two kinds: **bytes** (id i is byte i, 256 ids: any file, the standard library corpus), stored
as just its kind; **tokens** (d-eggs' ``decoding.bin``: id i spells ``pieces[i]``, any number of
bytes, possibly none), stored as the pieces' bytes end to end (uint8) and their lengths (int64).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

BYTE_PIECES = tuple(bytes([b]) for b in range(256))


@dataclass(frozen=True)
class Vocabulary:
    """``pieces[i]``: the bytes token i spells; ``is_bytes``: plain byte data (id i is byte i)."""

    pieces: tuple[bytes, ...]
    is_bytes: bool = False

    @property
    def size(self) -> int:
        return len(self.pieces)

    def token_bytes(self) -> Tensor:
        """(V,) byte length of every token (1 for byte data)."""
        return torch.tensor([len(p) for p in self.pieces], dtype=torch.float64)

    def decode(self, ids) -> str:
        return b"".join(self.pieces[int(i)] for i in ids).decode("utf-8", errors="replace")

    def encode(self, text: str) -> list[int]:
        """Bytes for byte data; for token data, greedy longest match over the pieces (ValueError
        naming the first byte no piece starts with)."""
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
                raise ValueError(f"the prompt byte {raw[i]!r} at offset {i} has no token in the vocabulary")
        return ids

    # -- in a checkpoint's task state (tensors and plain values: engine/tree_io.py) ----------
    def to_state(self) -> dict:
        if self.is_bytes:
            return {"kind": "bytes"}
        joined = np.frombuffer(b"".join(self.pieces), dtype=np.uint8).copy()
        return {"kind": "tokens", "bytes": torch.from_numpy(joined),
                "lengths": torch.tensor([len(p) for p in self.pieces], dtype=torch.int64)}

    @classmethod
    def from_state(cls, state: dict) -> "Vocabulary":
        """The vocabulary :meth:`to_state` saved (ValueError naming what is wrong with a damaged one)."""
        kind = state.get("kind") if isinstance(state, dict) else None
        if kind == "bytes":
            return BYTES
        if kind != "tokens":
            raise ValueError(f"unknown vocabulary kind {kind!r} (expected 'bytes' or 'tokens')")
        data, lengths = state["bytes"].to(torch.uint8).numpy().tobytes(), state["lengths"].tolist()
        if any(n < 0 for n in lengths) or sum(lengths) != len(data):
            raise ValueError(f"the vocabulary's {len(lengths)} lengths add up to {sum(lengths)} bytes, "
                             f"but it holds {len(data)}")
        pieces, at = [], 0
        for n in lengths:
            pieces.append(data[at:at + n])
            at += n
        return cls(tuple(pieces), is_bytes=False)


BYTES = Vocabulary(BYTE_PIECES, is_bytes=True)
