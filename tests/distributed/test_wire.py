"""The wire format: exact round trips, every kind of bad message refused with its reason, and a
fuzz of random and mutated bytes that never crashes the decoder or gets a corrupt message in."""
import random
import struct
import zlib

import numpy as np
import pytest
import torch

from hyperscalees.distributed import wire
from hyperscalees.distributed.wire import F16, F32, HEADER, RESULT, SHAPED, TERNARY, WireError, decode, encode


def test_ternary_packing_matches_the_hand_computed_bytes():
    # codes 0 -> 0, +1 -> 1, -1 -> 2; first value in the lowest base-3 digit
    codes = np.array([2, 0, 1, 2, 0, 1, 1], dtype=np.uint8)  # [-1, 0, 1, -1, 0, 1, 1]
    assert wire.pack_trits(codes) == bytes([2 + 0 + 9 + 54 + 0, 1 + 3])
    assert wire.unpack_trits(bytes([65, 4]), 7).tolist() == codes.tolist()


@pytest.mark.parametrize("n", [1, 4, 5, 6, 63, 64, 1001])
def test_ternary_round_trip_is_exact_and_takes_1_6_bits(n):
    g = torch.Generator().manual_seed(n)
    v = (torch.randint(-1, 2, (n,), generator=g) * 0.5).float()
    msg = encode(SHAPED, 3, 0, v, TERNARY)
    assert len(msg) == HEADER + 4 + -(-n // 5)
    out = decode(msg, SHAPED, 3, 0, n)
    assert out.values.dtype == torch.float32 and torch.equal(out.values, v)


def test_float_round_trips():
    v = torch.tensor([1.5, -0.0, float("nan"), float("inf"), 3.14159e-20, -7.0])
    out = decode(encode(RESULT, 9, 40, v), RESULT, 9, 40, 6).values
    assert torch.equal(out.view(torch.int32), v.view(torch.int32))  # bit for bit, NaN and -0 included
    half = decode(encode(RESULT, 9, 40, v, F16), RESULT, 9, 40, 6).values
    assert torch.equal(half[[0, 1, 3, 5]], v[[0, 1, 3, 5]]) and half[4] == 0 and half[2].isnan()
    m = torch.arange(12.0).view(4, 3)
    back = decode(encode(RESULT, 0, 8, m), RESULT, 0, 8, 4, 3).values
    assert back.shape == (4, 3) and torch.equal(back, m)
    col = decode(encode(RESULT, 0, 8, m[:, :1]), RESULT, 0, 8, 4).values
    assert col.shape == (4, 1)  # (count, 1) stays two-dimensional


def test_header_is_big_endian_and_fixed_size():
    msg = encode(RESULT, 0x0102030405, 7, torch.ones(3))
    assert msg[:4] == b"HSES" and msg[4] == wire.VERSION and msg[5] == RESULT
    assert msg[8:16] == bytes([0, 0, 0, 1, 2, 3, 4, 5]) and msg[16:20] == bytes([0, 0, 0, 7])
    assert len(msg) == HEADER + 12 and HEADER == 36


def _reseal(msg: bytes) -> bytes:
    """Recompute the checksum after editing the header, to test the field checks behind it."""
    head = msg[:32] + b"\0\0\0\0"
    return msg[:32] + struct.pack(">I", zlib.crc32(msg[HEADER:], zlib.crc32(head))) + msg[HEADER:]


def test_every_bad_message_is_refused_with_its_reason():
    good = encode(RESULT, 5, 10, torch.arange(4.0))
    decode(good, RESULT, 5, 10, 4)
    cases = {
        "bad magic": _reseal(b"XXXX" + good[4:]),
        "unsupported version 2": _reseal(good[:4] + bytes([2]) + good[5:]),
        "message kind 'shaped'": _reseal(good[:5] + bytes([SHAPED]) + good[6:]),
        "unknown encoding 9": _reseal(good[:6] + bytes([9]) + good[7:]),
        "bad flags": _reseal(good[:7] + bytes([4]) + good[8:]),
        "step 6, expected step 5": _reseal(good[:8] + struct.pack(">Q", 6) + good[16:]),
        r"members \[11, 15\)": _reseal(good[:16] + struct.pack(">I", 11) + good[20:]),
        "truncated": good[:20],
        "header says 16 payload bytes, 15 arrived": good[:-1],
        "checksum mismatch": good[:-1] + bytes([good[-1] ^ 1]),
        "cannot hold": _reseal(good[:28] + struct.pack(">I", 20) + good[32:] + b"\0" * 4),
    }
    for why, msg in cases.items():
        with pytest.raises(WireError, match=why):
            decode(msg, RESULT, 5, 10, 4)
    with pytest.raises(WireError, match="expected bytes"):
        decode("text", RESULT, 5)


def test_ternary_refuses_non_canonical_bytes_and_bad_scales():
    msg = encode(SHAPED, 1, 0, torch.tensor([0.5, -0.5, 0.0]), TERNARY)
    for payload, why in [(struct.pack(">f", 0.5) + bytes([243]), "above 242"),
                         (struct.pack(">f", 0.5) + bytes([2 + 3 * 2 + 81]), "non-zero digits past"),
                         (struct.pack(">f", -1.0) + bytes([1]), "scale"),
                         (struct.pack(">f", float("nan")) + bytes([1]), "scale")]:
        bad = _reseal(msg[:28] + struct.pack(">I", len(payload)) + msg[32:HEADER] + payload)
        with pytest.raises(WireError, match=why):
            decode(bad, SHAPED, 1, 0, 3)
    with pytest.raises(ValueError, match="ternary encoding needs"):
        encode(SHAPED, 1, 0, torch.tensor([0.5, 0.25]), TERNARY)
    assert wire.ternary_scale(torch.tensor([0.5, -0.5, 0.0])) == 0.5
    assert wire.ternary_scale(torch.tensor([0.5, float("nan")])) is None


def test_encode_refuses_bad_arguments():
    with pytest.raises(ValueError, match="count >= 1"):
        encode(RESULT, 0, 0, torch.zeros(0))
    with pytest.raises(ValueError, match="unknown message kind"):
        encode(7, 0, 0, torch.zeros(2))
    with pytest.raises(ValueError, match="unknown encoding"):
        encode(RESULT, 0, 0, torch.zeros(2), 5)


def test_fuzz_random_and_mutated_bytes_never_crash_or_pass_corrupt():
    rng = random.Random(1234)
    seeds = [encode(RESULT, 3, 8, torch.randn(8)), encode(RESULT, 3, 8, torch.randn(8), F16),
             encode(RESULT, 3, 8, torch.tensor([0.5, -0.5] * 4), TERNARY),
             encode(RESULT, 3, 8, torch.randn(8, 2))]
    accepted = 0
    for case in range(4000):
        original = rng.choice(seeds)
        b = bytearray(original)
        how = case % 5
        if how == 0:
            b = bytearray(rng.randbytes(rng.randrange(0, 120)))
        elif how == 1:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif how == 2:
            b = b[:rng.randrange(len(b))]
        elif how == 3:
            b += rng.randbytes(rng.randint(1, 8))
        else:
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        try:
            m = decode(bytes(b), RESULT, 3, 8, 8)
        except WireError:
            continue
        accepted += 1  # only the unchanged message may pass (a byte rewritten to its own value)
        assert bytes(b) == original, f"corrupt message accepted (case {case})"
        assert m.step == 3 and m.offset == 8
    assert accepted < 100
