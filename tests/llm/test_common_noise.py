"""Sampling with common random numbers: twins share their Gumbel noise, the draw is the softmax at the
temperature, and the noise is a pure function of (key, position, pair, prompt, token): any chunking agrees."""
from __future__ import annotations

import math

import pytest
import torch

import hyperscalees as hs
from hyperscalees import llm
from hyperscalees.llm.common_noise import CommonNoiseSampler, gumbel, row_streams, sampling_key
from hyperscalees.llm.generate import complete_chunk
from tiny import save


def test_twins_share_a_stream_per_prompt_and_pairs_do_not():
    s = row_streams(first_member=0, members=4, prompts=3).view(4, 3)
    assert torch.equal(s[0], s[1]) and torch.equal(s[2], s[3])  # members 0/1 and 2/3 are twins
    assert len(set(s[::2].flatten().tolist())) == 6  # two pairs x three prompts: all distinct
    assert torch.equal(row_streams(2, 2, 3), s[2:].flatten())  # a later chunk names the same streams


def test_gumbel_noise_is_a_pure_function_with_the_right_moments():
    streams = torch.arange(4000)
    g = gumbel(sampling_key(7, 3), 5, streams, 50)
    assert torch.equal(g, gumbel(sampling_key(7, 3), 5, streams, 50))
    for other in (gumbel(sampling_key(7, 3), 6, streams, 50), gumbel(sampling_key(7, 4), 5, streams, 50),
                  gumbel(sampling_key(8, 3), 5, streams, 50)):  # position, step, seed each change it
        assert (other != g).float().mean() > 0.99
    assert torch.isfinite(g).all()
    assert abs(g.mean().item() - 0.5772) < 0.02  # Euler-Mascheroni: the Gumbel mean (2e5 draws, sd 0.003)
    assert abs(g.var().item() - math.pi ** 2 / 6) < 0.05


def test_the_draw_follows_the_softmax_at_the_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    rows = 20000
    for temperature in (0.5, 2.0):
        sampler = CommonNoiseSampler(sampling_key(0, 0), temperature, first_member=0, members=2 * rows, prompts=1)
        scores = sampler(torch.zeros(2 * rows, 3, dtype=torch.long), logits.expand(2 * rows, 5))
        picks = scores.argmax(-1).view(rows, 2)
        assert torch.equal(picks[:, 0], picks[:, 1])  # twins draw the same token from the same scores
        freq = torch.bincount(picks[:, 0], minlength=5).float() / rows
        expected = torch.softmax(logits / temperature, -1)
        sd = (expected * (1 - expected) / rows).sqrt()
        assert ((freq - expected).abs() < 5 * sd + 1e-3).all(), (temperature, freq, expected)


def test_any_chunking_of_the_population_draws_the_same_noise():
    key, scores, ids = sampling_key(3, 11), torch.randn(8 * 2, 9), torch.zeros(8 * 2, 4, dtype=torch.long)
    whole = CommonNoiseSampler(key, 1.0, 0, 8, 2)(ids, scores)
    parts = [CommonNoiseSampler(key, 1.0, lo, 4, 2)(ids[lo * 2:(lo + 4) * 2], scores[lo * 2:(lo + 4) * 2])
             for lo in (0, 4)]
    assert torch.equal(torch.cat(parts), whole)


def test_the_sampler_refuses_a_bad_temperature_and_a_wrong_batch():
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        CommonNoiseSampler(1, 0, 0, 2, 1)
    with pytest.raises(ValueError, match="expected 2 members x 3 prompts = 6 rows, got 4"):
        CommonNoiseSampler(1, 1.0, 0, 2, 3)(torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 5))


# -- through generate -------------------------------------------------------------------------------
PROMPTS = ["12+3=", "ab", "hello world"]
PAIRED = llm.Sampling(max_new_tokens=10, do_sample=True, temperature=2.0, common_noise=True, seed=4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("transformers")
    return llm.load_causal_lm(save("llama", tmp_path_factory.mktemp("m") / "llama"))


@pytest.mark.usefixtures("one_thread")
def test_unperturbed_twins_write_the_same_samples_and_pairs_differ(tiny):
    model, tok = tiny
    texts, _, _ = complete_chunk(model, tok, PROMPTS, PAIRED, (0, 4), step=0)
    members = [texts[i * 3:(i + 1) * 3] for i in range(4)]
    assert members[0] == members[1] and members[2] == members[3]  # same weights, same noise
    assert members[0] != members[2]  # another pair's noise: another sample (temperature 2)
    greedy, _, _ = llm.complete(model, tok, PROMPTS, llm.Sampling(max_new_tokens=10))
    assert members[0] != greedy


@pytest.mark.usefixtures("one_thread")
def test_population_samples_are_the_same_for_any_chunking(tiny):
    model, tok = tiny
    es = hs.EGGROLL(model, population=8, sigma=0.1, es_map=llm.evolving(model))
    whole = llm.generate(es, tok, PROMPTS, PAIRED)
    assert llm.generate(es, tok, PROMPTS, PAIRED, chunk=2).texts == whole.texts
    assert llm.generate(es, tok, PROMPTS, PAIRED, members=(4, 8)).texts == whole.texts[4:]


def test_sampling_refuses_common_noise_it_cannot_honour():
    with pytest.raises(ValueError, match="set do_sample=True"):
        llm.Sampling(common_noise=True)
    with pytest.raises(ValueError, match="temperature only, got top_k=5"):
        llm.Sampling(do_sample=True, common_noise=True, top_k=5)
