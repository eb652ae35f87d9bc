"""An egg, and an int8 transformer, started as a bigram (models/bigram_init.py): counts, the int8 fit,
neutral blocks."""
import math

import pytest
import torch

from hyperscalees.models.bigram_init import bigram_log2, expected_bits, init_from_bigram
from hyperscalees.models.egg import Egg
from hyperscalees.models.int8_transformer import Int8Transformer


pytestmark = pytest.mark.usefixtures("one_thread")


def markov_tokens(vocab: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """n tokens of a random first-order Markov chain over ``vocab`` symbols (peaked rows) and its matrix."""
    g = torch.Generator().manual_seed(seed)
    trans = torch.softmax(3.0 * torch.randn(vocab, vocab, generator=g), dim=1)
    chains = 100                                        # stepped side by side, then laid end to end
    steps = torch.empty(chains, n // chains, dtype=torch.long)
    steps[:, 0] = torch.randint(vocab, (chains,), generator=g)
    for i in range(1, steps.shape[1]):
        steps[:, i] = torch.multinomial(trans[steps[:, i - 1]], 1, generator=g)[:, 0]
    return steps.reshape(-1), trans


def test_counts_are_add_one_smoothed_bigrams():
    lp, weights = bigram_log2(torch.tensor([1, 2, 1, 2, 1, 3]), 4)
    assert weights.tolist() == [0, 3, 2, 0]  # how often each token precedes another
    assert lp[1].exp2().tolist() == pytest.approx([1 / 7, 1 / 7, 3 / 7, 2 / 7])
    assert lp[0].exp2().tolist() == pytest.approx([0.25] * 4)  # never seen: uniform
    assert torch.allclose(lp.exp2().sum(1), torch.ones(4, dtype=torch.float64))


def true_entropy_bits(lp, weights):
    return float(((-(lp.exp2() * lp).sum(1)) * weights).sum() / weights.sum())


def model_bits(model, tokens):
    """Bits per token of the model on ``tokens``, cut into 40 streams."""
    streams = tokens[: len(tokens) // 40 * 40].view(40, -1)
    logits, _ = model(streams[:, :-1])
    return float(torch.nn.functional.cross_entropy(logits.flatten(0, 1).double(), streams[:, 1:].flatten())
                 / math.log(2))


def test_a_bigram_started_egg_scores_about_the_bigram_and_its_blocks_add_nothing():
    vocab = 24
    tokens, _ = markov_tokens(vocab, 20_000)
    lp, weights = bigram_log2(tokens, vocab)
    torch.manual_seed(0)
    model = Egg(vocab_size=vocab, dim=32, layers=2)
    random_bits = model_bits(model, tokens[:4000])
    fitted = init_from_bigram(model, lp, weights)
    bigram = true_entropy_bits(lp, weights)
    assert fitted == pytest.approx(expected_bits(model.head(model.norm_out(model.embed.weight)).double(), lp, weights))
    assert fitted < bigram + 0.05                      # rank 32 >= vocab 24: only int8 rounding is lost
    bits = model_bits(model, tokens[:4000])
    assert bits < bigram + 0.1 and bits < random_bits - 1.0
    # the blocks are neutral: a token's logits do not depend on what came before it
    seq = tokens[100:140][None]
    logits, _ = model(seq)
    alone = torch.stack([model(seq[:, t:t + 1])[0][0, 0] for t in range(seq.shape[1])])
    assert torch.equal(logits[0], alone)
    for block in model.blocks:
        assert not block.wh.weight.any() and not block.uh.weight.any() and not block.down.weight.any()


def test_a_low_rank_model_keeps_what_its_width_can():
    """Width below the vocabulary: the fit is the rank-D approximation, worse than the table, better than none."""
    vocab = 48
    tokens, _ = markov_tokens(vocab, 30_000, seed=1)
    lp, weights = bigram_log2(tokens, vocab)
    narrow, wide = Egg(vocab_size=vocab, dim=8, layers=1), Egg(vocab_size=vocab, dim=48, layers=1)
    b8, b48 = init_from_bigram(narrow, lp, weights), init_from_bigram(wide, lp, weights)
    unigram = float(-(weights / weights.sum() * (weights / weights.sum()).clamp_min(1e-12).log2()).sum())
    assert true_entropy_bits(lp, weights) - 0.01 < b48 < b8 < unigram


def test_a_wrong_table_is_refused():
    with pytest.raises(ValueError, match="log2_probs must be"):
        init_from_bigram(Egg(vocab_size=16, dim=8, layers=1), torch.zeros(8, 8), torch.ones(8))


def test_the_lm_option_names_the_models_it_supports():
    from hyperscalees.tasks.lm.task import LMOptions
    with pytest.raises(ValueError, match="init 'bigram' is for egg"):
        LMOptions(model="float-gru", init="bigram")
    with pytest.raises(ValueError, match="unknown init"):
        LMOptions(init="zeros")


def test_a_bigram_start_keeps_its_embedding_and_head_at_a_fraction_of_the_lr(tmp_path):
    """The lm task's groups: embedding and head at BIGRAM_LR_SCALE x --lr, the rest as the model says."""
    from hyperscalees.tasks.lm.task import BIGRAM_LR_SCALE, LMTask
    data = tmp_path / "text.txt"
    data.write_bytes(bytes(range(32, 127)) * 400)
    task = LMTask(seed=0, options={"model": "egg", "hidden": 16, "layers": 1, "init": "bigram", "data": str(data)})
    model = task.build_model()
    groups = task.es_options(model)["groups"]
    bigram = [g for g in groups if g["name"] == "bigram"]
    assert bigram == [{"params": ["embed.weight", "head.weight"], "lr_scale": BIGRAM_LR_SCALE, "name": "bigram"}]
    plain = LMTask(seed=0, options={"model": "egg", "hidden": 16, "layers": 1, "data": str(data)})
    assert all(g["name"] != "bigram" for g in plain.es_options(plain.build_model()).get("groups", []))


def test_the_bigram_start_is_the_same_every_time():
    """The same inputs give the same model, bit for bit (the least-squares head once varied per call)."""
    tokens, _ = markov_tokens(24, 20_000)
    lp, weights = bigram_log2(tokens, 24)
    states = []
    for _ in range(4):
        torch.manual_seed(0)
        model = Egg(vocab_size=24, dim=32, layers=2)
        states.append((init_from_bigram(model, lp, weights), {k: v.clone() for k, v in model.state_dict().items()}))
        model_bits(model, tokens[:4000])  # other work between the calls (the old head varied after it)
    for bits, sd in states[1:]:
        assert bits == states[0][0]
        assert all(torch.equal(v, states[0][1][k]) for k, v in sd.items())


# -- the int8 transformer: a tied head ----------------------------------------------------------


def transformer_start(vocab=24, dim=32, seed=0):
    tokens, _ = markov_tokens(vocab, 20_000, seed=seed)
    lp, weights = bigram_log2(tokens, vocab)
    torch.manual_seed(0)
    return tokens, lp, weights, Int8Transformer(vocab_size=vocab, dim=dim, layers=2, heads=2)


def test_a_bigram_started_transformer_scores_its_fit_and_its_blocks_add_nothing():
    tokens, lp, weights, model = transformer_start()
    random_bits = model_bits(model, tokens[:4000])
    fitted = init_from_bigram(model, lp, weights)
    # the returned figure is the int8 model's own: every token alone, logits in 1/6 nat
    alone = model.int_forward(torch.arange(24)[:, None])[:, 0].double() * (16 / (6 * math.log(2)))
    assert fitted == pytest.approx(expected_bits(alone, lp, weights), abs=1e-9)
    bigram = true_entropy_bits(lp, weights)
    unigram_p = weights / weights.sum()
    unigram = float(-(unigram_p * unigram_p.clamp_min(1e-12).log2()).sum())
    assert bigram < fitted < bigram + 0.1 < unigram
    bits = model_bits(model, tokens[:4000])
    assert bits < fitted + 0.1 and bits < random_bits - 1.0
    # neutral blocks: a token's logits do not depend on what came before it
    seq = tokens[100:132][None]
    logits, _ = model(seq)
    each = torch.stack([model(seq[:, t:t + 1])[0][0, 0] for t in range(seq.shape[1])])
    assert torch.equal(logits[0], each)
    for block in model.blocks:
        assert not block.o.weight.any() and not block.mlp.down.weight.any() and not block.mlp.down.bias.any()
    assert not model.embed_bias.weight.any()


def test_the_init_mlp_breaks_the_tied_heads_symmetry():
    """Without the init MLP a tied head's start is symmetric in (previous, next) and keeps less of an
    asymmetric chain; the init MLP, fitted through the int8 roundings, gets near the table."""
    tokens, lp, weights, model = transformer_start()
    symmetric = Int8Transformer(vocab_size=24, dim=32, layers=1, heads=2, init_mlp=False)
    bigram = true_entropy_bits(lp, weights)
    with_mlp, without = init_from_bigram(model, lp, weights), init_from_bigram(symmetric, lp, weights)
    assert with_mlp < bigram + 0.1 < without
    assert model.init_mlp.down.weight.any()


def test_the_fit_sees_the_int8_path_exactly():
    """The straight-through image of the token-alone path equals int_forward, for any int8 weights."""
    from hyperscalees.models.bigram_init import _tensors, _tied_logits, neutralise_blocks
    torch.manual_seed(3)
    model = Int8Transformer(vocab_size=40, dim=16, layers=1, heads=2)
    neutralise_blocks(model)
    for name, t in _tensors(model).items():
        t.copy_(torch.randint(-127, 128, t.shape, dtype=torch.int8) // (1 if t.dim() > 1 else 4))
    p = {k: t.double() for k, t in _tensors(model).items()}
    div = {"head": model.embed.head_divisor, "up": model.init_mlp.up.divisor, "down": model.init_mlp.down.divisor}
    exact = model.int_forward(torch.arange(40)[:, None])[:, 0].double()
    assert torch.allclose(_tied_logits(p, div) * 6, exact, rtol=0, atol=1e-9)  # x/6·6: float rounding only


def test_a_wider_transformer_keeps_more_of_the_bigram():
    vocab = 48
    tokens, lp, weights, narrow = transformer_start(vocab, dim=8, seed=1)
    wide = Int8Transformer(vocab_size=vocab, dim=48, layers=1, heads=2)
    assert true_entropy_bits(lp, weights) < init_from_bigram(wide, lp, weights) < init_from_bigram(narrow, lp, weights)


def test_the_transformer_start_is_the_same_every_time():
    _, lp, weights, _ = transformer_start()
    states = []
    for _ in range(3):
        torch.manual_seed(1)
        model = Int8Transformer(vocab_size=24, dim=32, layers=1, heads=2)
        states.append((init_from_bigram(model, lp, weights), model.state_dict()))
    for bits, sd in states[1:]:
        assert bits == states[0][0] and all(torch.equal(v, states[0][1][k]) for k, v in sd.items())


def test_the_lm_task_starts_the_transformer_as_a_bigram_and_keeps_its_embedding_slow(tmp_path):
    from hyperscalees.tasks.lm.task import BIGRAM_LR_SCALE, LMTask
    data = tmp_path / "text.txt"
    data.write_bytes(b"the quick brown fox jumps over the lazy dog; " * 300)
    options = {"model": "int8-transformer", "hidden": 16, "layers": 1, "init": "bigram", "data": str(data)}
    task = LMTask(seed=0, options=options)
    model = task.build_model()
    assert not model.blocks[0].o.weight.any()
    bigram = [g for g in task.es_options(model)["groups"] if g["name"] == "bigram"]
    held = ["embed.weight", "init_mlp.up.weight", "init_mlp.down.weight"]
    assert bigram == [{"params": held, "lr_scale": BIGRAM_LR_SCALE, "name": "bigram"}]
    # its default start, at its own width and lr (the egg's width and ES settings stay the egg's)
    chosen = LMTask.option_defaults({"model": "int8-transformer"})
    assert chosen == {"init": "bigram"}
    es = LMTask.model_es_defaults({"model": "int8-transformer", **chosen})
    assert (es["lr"], es["update_rule"], es["population"]) == (0.125, "int_adamw", 64)
    assert LMTask.model_es_defaults({"model": "int8-transformer", "init": "random"})["lr"] == 0.25
