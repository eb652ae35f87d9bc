"""Large or unsized --data files: read only what is used, say so, refuse what cannot fit (issue 19, item 9)."""
import os

import numpy as np
import pytest

from hyperscalees.tasks.lm import data as data_mod
from hyperscalees.tasks.lm.data import DataError, load_corpus


def test_a_file_longer_than_max_bytes_reads_only_its_start_and_says_so(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 5_800_000, dtype=np.uint8).tobytes())
    corpus = load_corpus(str(path), 0.05, max_bytes=4 << 20)
    assert corpus.train.numel() + corpus.val.numel() + corpus.test.numel() == 4 << 20
    assert "first 4,194,304 of 5,800,000 bytes" in corpus.info["note"] and "--max-bytes 0" in corpus.info["note"]
    assert "note" not in load_corpus(str(path), 0.05, max_bytes=0).info


def test_data_too_large_for_memory_is_refused_naming_max_bytes(tmp_path, monkeypatch):
    path = tmp_path / "huge.bin"
    path.write_bytes(b"x" * 100_000)
    monkeypatch.setattr(data_mod, "available_memory", lambda: 200_000)   # as an 8 GB file on a small machine
    with pytest.raises(DataError, match=r"needs about .* GiB of memory, more than .* free; .*--max-bytes"):
        load_corpus(str(path), 0.05, max_bytes=0)
    assert load_corpus(str(path), 0.05, max_bytes=5_000).train.numel() > 0


@pytest.mark.skipif(not os.path.exists("/dev/urandom"), reason="no /dev/urandom")
def test_a_device_is_read_only_with_a_cap():
    with pytest.raises(DataError, match="not a regular file.*--max-bytes"):
        load_corpus("/dev/urandom", 0.05, max_bytes=0)
    corpus = load_corpus("/dev/urandom", 0.05, max_bytes=10_000)
    assert corpus.train.numel() + corpus.val.numel() + corpus.test.numel() == 10_000
