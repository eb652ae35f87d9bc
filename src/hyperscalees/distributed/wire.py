"""The bytes a distributed run exchanges: chunk results and shaped-fitness updates.

Only fitness crosses the network each step, never weights (those travel only to a new or
repaired worker), so a message is a population slice of numbers behind a header that says
exactly what they are. Everything is checked on decode, because a worker's bytes are
untrusted: a torn, replayed or mis-addressed message must be refused, never believed.

Header, 36 bytes, big-endian, fixed size (``HEADER``)::

    offset size field
    0      4    magic        b"HSES"
    4      1    version      VERSION; bumped whenever any layout below changes
    5      1    kind         RESULT (worker -> coordinator) or SHAPED (coordinator -> workers)
    6      1    encoding     F32, F16 or TERNARY
    7      1    flags        bit 0: values are (count, width) rather than (count,); others 0
    8      8    step         the ES step the values belong to
    16     4    offset       first member of the slice
    20     4    count        members in the slice
    24     4    width        values per member (G columns of (P, G) fitness; 1 for (P,))
    28     4    length       payload bytes that follow the header
    32     4    checksum     CRC-32 of the header (checksum field zeroed) and the payload

Payloads: F32 / F16 are count*width big-endian floats, member-major. TERNARY (width 1 only)
is a big-endian float32 scale > 0 followed by ceil(count / 5) bytes, five base-3 digits per
byte, first value in the least significant digit (codes 0 -> 0, 1 -> +scale, 2 -> -scale);
a byte above 242 or a non-zero unused digit in the last byte is refused, so each vector has
exactly one encoding. That is 1.6 bits per member: pair-sign and ternary shaping produce only
{-s, 0, +s}.

The decoder never trusts ``length``: it compares it with the bytes it was given and with
the size the (count, width, encoding) imply before reading anything.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

MAGIC = b"HSES"
VERSION = 1
RESULT, SHAPED = 1, 2
KINDS = {RESULT: "result", SHAPED: "shaped"}
F32, F16, TERNARY = 0, 1, 2
ENCODINGS = {F32: "float32", F16: "float16", TERNARY: "ternary"}
_HEAD = struct.Struct(">4sBBBBQIIIII")
HEADER = _HEAD.size  # 36
MAX_COUNT = 2**31 - 1
MATRIX = 1  # flags bit: (count, width) values
# a trit code per value -> its digit: 0 -> 0, +1 -> 1, -1 -> 2
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)
_MAX_BYTE = 242  # 2 + 2*3 + 2*9 + 2*27 + 2*81


class WireError(ValueError):
    """A message that must not be believed; ``str(err)`` says why in one line."""


@dataclass(frozen=True)
class Message:
    kind: int
    step: int
    offset: int
    values: Tensor          # float32, (count,) or (count, width)
    encoding: int

    @property
    def count(self) -> int:
        return int(self.values.shape[0])


def pack_trits(codes: np.ndarray) -> bytes:
    """Codes in {0, 1, 2} (n,) -> ceil(n / 5) bytes, five base-3 digits each, first value lowest."""
    n = codes.size
    padded = np.zeros(-(-n // 5) * 5, dtype=np.uint8)
    padded[:n] = codes
    return (padded.reshape(-1, 5) * _POW3).sum(axis=1, dtype=np.uint16).astype(np.uint8).tobytes()


def unpack_trits(data: bytes, n: int) -> np.ndarray:
    """The inverse of :func:`pack_trits`; raises WireError on a non-canonical byte."""
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size != -(-n // 5):
        raise WireError(f"ternary payload of {b.size} bytes cannot hold {n} values")
    if b.size and int(b.max()) > _MAX_BYTE:
        raise WireError(f"ternary byte {int(b.max())} is above {_MAX_BYTE}")
    digits = (b[:, None] // _POW3[None, :]) % 3  # (bytes, 5)
    flat = digits.reshape(-1)
    if flat[n:].any():
        raise WireError("ternary payload has non-zero digits past its last value")
    return flat[:n]


def ternary_scale(values: Tensor) -> float | None:
    """s when every value is in {-s, 0, +s} for one s > 0 (all zeros: s = 1), else None."""
    v = values.detach().reshape(-1).float().cpu()
    if v.dim() == 0 or not bool(torch.isfinite(v).all()):
        return None
    nz = v[v != 0]
    if nz.numel() == 0:
        return 1.0
    s = float(nz[0].abs())
    return s if bool((nz.abs() == s).all()) and s > 0 else None


def _payload(values: Tensor, encoding: int) -> bytes:
    v = values.detach().float().cpu().contiguous()
    if encoding == F32:
        return v.numpy().astype(">f4").tobytes()
    if encoding == F16:
        return v.numpy().astype(">f2").tobytes()
    if encoding == TERNARY:
        s = ternary_scale(v)
        if s is None or v.dim() != 1:
            raise ValueError("ternary encoding needs (count,) values that are all in {-s, 0, +s}")
        codes = np.where(v.numpy() > 0, 1, np.where(v.numpy() < 0, 2, 0)).astype(np.uint8)
        return struct.pack(">f", s) + pack_trits(codes)
    raise ValueError(f"unknown encoding {encoding!r}; choose one of {sorted(ENCODINGS)}")


def encode(kind: int, step: int, offset: int, values, encoding: int = F32) -> bytes:
    """One message: ``values`` (count,) or (count, width) of members [offset, offset + count) at ``step``."""
    if kind not in KINDS:
        raise ValueError(f"unknown message kind {kind!r}; choose one of {sorted(KINDS)}")
    values = torch.as_tensor(values)
    if values.dim() not in (1, 2) or values.numel() == 0 or values.shape[0] > MAX_COUNT:
        raise ValueError(f"values must be (count,) or (count, width) with count >= 1, got {tuple(values.shape)}")
    width = 1 if values.dim() == 1 else int(values.shape[1])
    payload = _payload(values, encoding)
    flags = MATRIX if values.dim() == 2 else 0
    fields = (MAGIC, VERSION, kind, encoding, flags, int(step), int(offset), values.shape[0], width, len(payload))
    head = _HEAD.pack(*fields, 0)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return _HEAD.pack(*fields, crc) + payload


def expected_length(encoding: int, count: int, width: int) -> int:
    if encoding == F32:
        return 4 * count * width
    if encoding == F16:
        return 2 * count * width
    return 4 + -(-count // 5)  # TERNARY: scale + trits


def decode(data: bytes, kind: int, step: int, offset: int | None = None, count: int | None = None,
           width: int | None = None) -> Message:
    """The message in ``data`` if it is exactly what was expected, else WireError saying why.

    ``offset``/``count``/``width``: the slice the receiver asked for (None: any slice, but
    still checked against the encoding and the byte count).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < HEADER:
        raise WireError(f"truncated: {len(data)} bytes, shorter than the {HEADER}-byte header")
    magic, version, k, enc, flags, st, off, n, w, length, crc = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise WireError(f"bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise WireError(f"unsupported version {version} (this side speaks {VERSION})")
    if k != kind:
        raise WireError(f"message kind {KINDS.get(k, k)!r}, expected {KINDS[kind]!r}")
    if enc not in ENCODINGS:
        raise WireError(f"unknown encoding {enc}")
    if flags & ~MATRIX or (flags & MATRIX and enc == TERNARY):
        raise WireError(f"bad flags {flags:#04x}")
    if st != step:
        raise WireError(f"step {st}, expected step {step}")
    if n < 1 or n > MAX_COUNT or w < 1 or (w != 1 and not flags & MATRIX):
        raise WireError(f"bad shape: count {n}, width {w}, encoding {ENCODINGS[enc]}")
    if (offset is not None and off != offset) or (count is not None and n != count) or \
            (width is not None and w != width):
        raise WireError(f"members [{off}, {off + n}) x {w}, expected [{offset}, {offset + (count or 0)}) x {width}")
    if length != len(data) - HEADER:
        raise WireError(f"header says {length} payload bytes, {len(data) - HEADER} arrived")
    if length != expected_length(enc, n, w):
        raise WireError(f"{length} payload bytes cannot hold {n} x {w} {ENCODINGS[enc]} values")
    head = _HEAD.pack(magic, version, k, enc, flags, st, off, n, w, length, 0)
    if zlib.crc32(data[HEADER:], zlib.crc32(head)) != crc:
        raise WireError("checksum mismatch (corrupted in transit)")
    return Message(kind=k, step=st, offset=off, values=_values(data[HEADER:], enc, n, w, bool(flags & MATRIX)),
                   encoding=enc)


def _values(payload: bytes, enc: int, n: int, w: int, matrix: bool) -> Tensor:
    if enc == TERNARY:
        (scale,) = struct.unpack_from(">f", payload)
        if not (np.isfinite(scale) and scale > 0):
            raise WireError(f"ternary scale {scale!r} is not a finite number > 0")
        codes = unpack_trits(payload[4:], n)
        v = np.where(codes == 1, np.float32(scale), np.where(codes == 2, np.float32(-scale), np.float32(0)))
        return torch.from_numpy(v.astype(np.float32))
    arr = np.frombuffer(payload, dtype=">f4" if enc == F32 else ">f2").astype(np.float32)
    t = torch.from_numpy(arr)
    return t.view(n, w) if matrix else t
