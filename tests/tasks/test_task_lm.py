"""The lm task: data loading and its errors, bits-per-byte maths, baselines, state carrying, resume."""
import math
import zlib

import pytest
import torch

import hyperscalees as hs
from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import load_checkpoint, load_run, make_config, read_rows, run
from hyperscalees.models.lm import AbstractLM
from hyperscalees.tasks import get_task
from hyperscalees.tasks.lm.data import (DataError, file_split, is_validation_file, load_corpus, stdlib_corpus,
                                        write_token_data)
from hyperscalees.tasks.lm.metrics import baselines, bigram_bits, token_bits, unigram_bits
from hyperscalees.tasks.lm.sampling import generate

SMALL = {"model": "float-gru", "hidden": 16, "layers": 1, "window": 16, "streams": 2, "max_bytes": 60000,
         "eval_tokens": 512, "eval_streams": 4, "sample_every": 0}


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"hello world, hello bytes. " * 200)
    return p


# -- data -------------------------------------------------------------------------------------
def test_bad_data_gives_clear_errors(tmp_path, text_file):
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="empty"):
        load_corpus(str(empty))
    with pytest.raises(DataError, match="does not exist"):
        load_corpus(str(tmp_path / "missing"))
    with pytest.raises(DataError, match=r"window 4000 .* longer than"):
        get_task("lm")(options={**SMALL, "data": str(text_file), "window": 4000})
    tok = tmp_path / "tok"
    write_token_data(tok, [0, 1, 2, 7, 1], [b"a", b"bc", b"", b"d"])
    with pytest.raises(DataError, match=r"token id 7 at position 3 is >= the vocabulary size 4"):
        load_corpus(str(tok))
    (tok / "input.bin").write_bytes(b"\x01\x00\x00")
    with pytest.raises(DataError, match="not a whole number of uint32"):
        load_corpus(str(tok))
    (tok / "decoding.bin").write_bytes((5).to_bytes(4, "little") + (9).to_bytes(4, "little") + b"ab")
    with pytest.raises(DataError, match="token 0 claims 9 bytes"):
        load_corpus(str(tok))


def test_token_format_reads_ids_and_decodes(tmp_path):
    pieces = [b"ab", b"c", b"\xc3\xa9", b"  "]
    ids = [0, 1, 2, 3] * 50
    write_token_data(tmp_path, ids, pieces)
    c = load_corpus(str(tmp_path), val_fraction=0.1)
    assert c.vocab_size == 4 and not c.is_bytes
    assert torch.equal(torch.cat([c.train, c.val, c.test]), torch.tensor(ids))
    assert c.val.numel() == 20 and c.test.numel() == 10            # the test split is the stream's end
    assert c.decode([0, 2, 1]) == "abéc"
    assert c.encode("abcab") == [0, 1, 0]
    assert c.token_bytes().tolist() == [2, 1, 2, 2]


def test_stdlib_corpus_is_split_by_file_deterministically(tmp_path):
    root = tmp_path / "lib"
    for i in range(60):
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / f"m{i:02d}.py").write_text(f"x = {i}\n")
    (root / "test").mkdir()
    (root / "test" / "t.py").write_text("SKIPPED\n")
    c = stdlib_corpus(0.2, 0, root=str(root), test_fraction=0.2)
    val, test = set(c.info["val_files"]), set(c.info["test_files"])
    names = [f"pkg/m{i:02d}.py" for i in range(60)]
    assert val == {n for n in names if is_validation_file(n, 0.2)}
    assert test == {n for n in names if file_split(n, 0.2, 0.2) == "test"}
    assert test == {n for n in names if 200 <= zlib.crc32(n.encode()) % 1000 < 400}   # the documented rule
    assert val and test and not val & test                        # disjoint, both used
    assert c.info["train_files"] == 60 - len(val) - len(test) > 0
    assert b"SKIPPED" not in bytes(c.train.tolist()) + bytes(c.val.tolist()) + bytes(c.test.tolist())
    assert int(c.train[0]) == 0 and int(c.val[0]) == 0 and int(c.test[0]) == 0   # documents start with byte 0
    assert (c.train == 0).sum() == c.info["train_files"] and (c.test == 0).sum() == len(test)
    files = lambda t: set(bytes(t.tolist()).split(b"\0")) - {b""}           # each file's text, here unique
    assert not files(c.train) & files(c.test) and not files(c.val) & files(c.test) and not files(c.train) & files(c.val)
    again = stdlib_corpus(0.2, 0, root=str(root), test_fraction=0.2)
    assert torch.equal(again.train, c.train) and torch.equal(again.test, c.test) and again.info == c.info
    assert set(stdlib_corpus(0.2, 0, root=str(root), test_fraction=0.3).info["val_files"]) == val  # val stays put
    with pytest.raises(DataError, match="sum below 1"):
        stdlib_corpus(0.5, 0, root=str(root), test_fraction=0.5)


def test_default_corpus_is_the_installed_stdlib():
    c = load_corpus(None, max_bytes=200_000)
    assert c.info["source"] == "python-stdlib" and c.vocab_size == 256
    assert c.info["train_tokens"] + c.info["val_tokens"] + c.info["test_tokens"] >= 200_000
    assert c.info["val_files"] and all(f.endswith(".py") for f in c.info["val_files"])
    assert c.info["test_files"] and not set(c.info["test_files"]) & set(c.info["val_files"])


# -- metrics ----------------------------------------------------------------------------------
def test_token_bits_of_a_known_distribution():
    p = torch.tensor([0.5, 0.25, 0.125, 0.125])
    logits = (p.log() + 3.0).expand(2, 4, 4)           # a constant shift changes nothing
    y = torch.tensor([[0, 1, 2, 3], [3, 3, 0, 1]])
    assert torch.allclose(token_bits(logits, y), -torch.log2(p)[y], atol=1e-6)
    assert torch.allclose(token_bits(torch.zeros(1, 3, 256), torch.zeros(1, 3, dtype=torch.long)),
                          torch.full((1, 3), 8.0))


def test_baselines_match_hand_computation():
    train = torch.tensor(list(b"aab"))
    streams = torch.tensor([list(b"xab")])              # targets 'a' (after 'x') and 'b' (after 'a')
    v = 256
    uni = [-math.log2(3 / 259), -math.log2(2 / 259)]   # (n+1)/(N+V): a: 2+1, b: 1+1; N = 3
    bi = [-math.log2(1 / 256), -math.log2(2 / 258)]    # 'x' never starts a pair; (a,b) once of 2 pairs from 'a'
    assert unigram_bits(train, streams[0, 1:], v).tolist() == pytest.approx(uni)
    assert bigram_bits(train, streams[0, :-1], streams[0, 1:], v).tolist() == pytest.approx(bi)
    b = baselines(train, streams, v, torch.ones(v, dtype=torch.float64))
    assert b["unigram_bpb"] == pytest.approx(sum(uni) / 2) and b["bigram_bpb"] == pytest.approx(sum(bi) / 2)
    two_byte = torch.full((v,), 2.0, dtype=torch.float64)   # tokens of 2 bytes: half the bits per byte
    assert baselines(train, streams, v, two_byte)["bigram_bpb"] == pytest.approx(sum(bi) / 4)


class FixedLM(AbstractLM):
    """Predicts one fixed distribution everywhere (and carries no state)."""

    def __init__(self, probs):
        super().__init__(len(probs))
        self.logp = torch.nn.Parameter(probs.log())

    def forward(self, tokens, state=None):
        return self.logp.expand(*tokens.shape, -1), None


def test_val_bpb_of_a_fixed_model_is_its_cross_entropy(text_file):
    task = get_task("lm")(options={**SMALL, "data": str(text_file)})
    probs = torch.bincount(task.corpus.train, minlength=256).double() + 1
    probs = (probs / probs.sum()).float()
    m = task.evaluate(FixedLM(probs))
    tgt = task.eval_streams()[:, 1:].reshape(-1)
    assert m["val_bpb"] == pytest.approx(float(-torch.log2(probs.double()[tgt]).mean()), rel=1e-5)
    assert m["val_bpb"] == pytest.approx(m["unigram_bpb"], rel=1e-5)  # that *is* the add-one unigram
    assert m["bigram_bpb"] < m["unigram_bpb"]


# -- fitness, state, resume -------------------------------------------------------------------
def test_state_is_carried_across_windows_and_chunks_agree():
    task = get_task("lm")(seed=1, options=SMALL)
    model = task.build_model()
    es = hs.EGGROLL(model, population=8, sigma=0.05, rank=1, lr=0.01, seed=2)
    fresh = task.fitness(model, 0, 2, step=1)        # step 1 with no step 0 before it: fresh state
    with torch.no_grad():
        whole = hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=0))
        again = get_task("lm")(seed=1, options=SMALL)
        chunked = hs.evaluate(es, lambda m, lo, hi, step: again.fitness(m, lo, hi, step=0), chunk=4)
        assert torch.allclose(whole, chunked, atol=1e-5)
        es.tell(whole)
        a = hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=1))
        b = hs.evaluate(es, lambda m, lo, hi, step: again.fitness(m, lo, hi, step=1), chunk=2)
    assert a.shape == (8, 2) and torch.allclose(a, b, atol=1e-5)
    st = task.state_dict()
    assert st["start_step"] == 2 and st["state"][0].shape == (8 * 2, 1, 16)
    with torch.no_grad():
        carried = task.fitness(model, 0, 2, step=1)
    assert not torch.allclose(carried, fresh)                 # the carried state changes the prediction


def test_resume_is_bit_identical(tmp_path):
    es = {"population": 8, "seed": 3, "sigma": 0.05}
    full, part = tmp_path / "full", tmp_path / "part"
    run(make_config("lm", es=es, engine={"steps": 4, "out": str(full), "eval_every": 2}, options=SMALL),
        LocalBackend)
    run(make_config("lm", es=es, engine={"steps": 2, "out": str(part), "eval_every": 2}, options=SMALL),
        LocalBackend)
    run(make_config("lm", es=es, engine={"steps": 4, "resume": str(part), "eval_every": 2}, options=SMALL),
        LocalBackend)
    a, b = load_run(full)[2].state_dict(), load_run(part)[2].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa, sb = load_checkpoint(full).task, load_checkpoint(part).task
    assert sa["start_step"] == sb["start_step"] == 4 and torch.equal(sa["state"][0], sb["state"][0])


def test_test_split_is_scored_once_at_the_end_over_all_of_it(tmp_path, monkeypatch):
    from hyperscalees.tasks.lm.task import LMTask
    calls = []
    real = LMTask.final_evaluate
    monkeypatch.setattr(LMTask, "final_evaluate", lambda self, m: calls.append(self.corpus.test.numel()) or real(self, m))
    out = tmp_path / "run"
    s = run(make_config("lm", es={"population": 4}, engine={"steps": 3, "eval_every": 1, "out": str(out)},
                        options=SMALL), LocalBackend)
    m = s["metrics"]
    assert len(calls) == 1                                          # not at every evaluation
    task = get_task("lm")(seed=0, options=SMALL)
    n_test, streams = task.corpus.test.numel(), task.test_streams()
    assert calls == [n_test] and sum(x.numel() for x in streams) == n_test     # every test token is read
    assert m["test_bytes"] == n_test - sum(x.shape[0] for x in streams)       # all but each stream's first
    assert 0 < m["bigram_test_bpb"] < m["unigram_test_bpb"] < 8 and 0 < m["test_bpb"] < 9
    assert m["bigram_test_bpb"] != m["bigram_bpb"]                  # other bytes than the validation's
    base = baselines(task.corpus.train, task.corpus.test[:200].view(1, -1), 256, task.corpus.token_bytes())
    assert 0 < base["bigram_bpb"] < 8
    split = load_checkpoint(out).task["data_split"]                # the split is recorded in the run
    assert split["test_files"] == task.corpus.info["test_files"] and split["test_tokens"] == n_test
    assert not set(split["test_files"]) & set(split["val_files"])


def test_progress_bar_shows_tokens_per_second():
    task = get_task("lm")(seed=0, options=SMALL)
    model = task.build_model()
    with torch.no_grad():
        task.fitness(model, 0, 4, step=0)                           # 4 members x 2 streams x 16 tokens
    assert task.progress(0.5) == {"tok/s": "256"}
    assert task.progress(0.5) == {}                                 # counted once


def test_backprop_reference_learns(text_file, tmp_path):
    from hyperscalees.engine.backprop import run_backprop
    cfg = make_config("lm", engine={"steps": 40, "eval_every": 40}, options={**SMALL, "data": str(text_file)})
    s = run_backprop(cfg, lr=0.01)
    assert s["steps"] == 40 and s["metrics"]["val_bpb"] < s["metrics"]["unigram_bpb"]
    out = tmp_path / "adam"
    cfg = make_config("lm", engine={"steps": 4, "eval_every": 2, "out": str(out)}, options={**SMALL, "data": str(text_file)})
    run_backprop(cfg, lr=0.01)
    rows = [r for r in read_rows(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and "val_bpb" in rows[1]
    assert load_run(out)[3] == 4                                # eval/generate read its checkpoint


def test_generation_is_seeded_and_respects_min_p():
    task = get_task("lm")(seed=0, options=SMALL)
    model = task.build_model()
    a = generate(model, [104, 105], 30, seed=5)
    assert a == generate(model, [104, 105], 30, seed=5) and len(a) == 30
    assert a != generate(model, [104, 105], 30, seed=6, temperature=2.0, min_p=0.0)
    probs = torch.full((256,), 1e-6)
    probs[[10, 20]] = 0.5
    fixed = FixedLM(probs / probs.sum())
    assert set(generate(fixed, [1], 50, seed=1, min_p=0.08, presence_penalty=0.0)) <= {10, 20}
    with pytest.raises(ValueError, match="temperature"):
        generate(model, [1], 3, temperature=0.0)


def test_ntt_option_adds_trained_feature_tables():
    task = get_task("lm")(seed=0, options={**SMALL, "ntt": "fermat"})
    model = task.build_model()
    assert any(n.startswith("ntt.tables.3") for n, _ in model.named_parameters())
    es = hs.EGGROLL(model, population=4, sigma=0.05, rank=1, lr=0.01, seed=0)
    before = model.ntt.tables[0].weight.clone()
    with torch.no_grad():
        es.tell(hs.evaluate(es, lambda m, lo, hi, step: task.fitness(m, lo, hi, step=0)))
    assert not torch.equal(before, model.ntt.tables[0].weight)      # ES moves the feature tables too


def test_egg_run_resumes_bit_identically_and_saves_int8_losslessly(tmp_path):
    from safetensors.torch import load_file
    opts = {**SMALL, "model": "egg", "hidden": 8, "window": 8}
    es = {"population": 8, "seed": 1}
    full, part = tmp_path / "full", tmp_path / "part"
    run(make_config("lm", es=es, engine={"steps": 4, "out": str(full), "eval_every": 4}, options=opts), LocalBackend)
    run(make_config("lm", es=es, engine={"steps": 2, "out": str(part), "eval_every": 4}, options=opts), LocalBackend)
    run(make_config("lm", es=es, engine={"steps": 4, "resume": str(part), "eval_every": 4}, options=opts),
        LocalBackend)
    cfg, task, model, step = load_run(full)
    assert cfg.es.update_rule == "int_sgd" and cfg.es.distribution == "int"   # TASK_ES_DEFAULTS over es_defaults
    saved = load_file(str(next(full.glob("model-*.safetensors"))))
    ints = {k: v for k, v in saved.items() if v.dtype == torch.int8}
    assert ints and all(torch.equal(v, model.state_dict()[k]) for k, v in ints.items())
    init = task.build_model().state_dict()
    assert any(not torch.equal(init[k], v) for k, v in ints.items())     # training did move integer weights
    b = load_run(part)[2].state_dict()
    assert all(torch.equal(v, b[k]) for k, v in model.state_dict().items())
