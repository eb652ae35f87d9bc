"""Fixtures the LLM tests share: a tiny Llama folder and a reward with a spread."""
import pytest

from tiny import save

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(save("llama", tmp_path_factory.mktemp("m") / "llama"))


@pytest.fixture(scope="module")
def variety(tmp_path_factory):
    """A reward with a spread (a random model's answers all score 0 on the task): distinct characters."""
    path = tmp_path_factory.mktemp("r") / "variety.py"
    path.write_text("def variety(prompt, completion):\n    return float(len(set(completion)))\n")
    return f"{path}:variety"
