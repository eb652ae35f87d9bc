"""Export an evolved model as an ordinary Hugging Face folder (safetensors + config + tokenizer).

The folder loads with plain ``transformers`` (``AutoModelForCausalLM.from_pretrained``), with
no trace of hyperscalees in it but ``hyperscalees.json`` (step, member, what evolved). It is
written beside the target and renamed into place, so a crash leaves the old folder or none,
never half of one. With ``es`` and ``member``, the member's own weights W + E_i are exported
(``es.materialized``): "export the best member". A model carrying adapters or a subspace
(``llm.what_evolves``) is saved merged into plain weights; the model itself is left as it is.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

from ..nn.select import holds_small_set, merged_copy


def plain_weights(model):
    """``model`` itself, or a merged copy where adapters or a subspace would not load in transformers."""
    return merged_copy(model) if holds_small_set(model) else model


def save_pretrained(model, tokenizer, path, *, es=None, member: int | None = None, overwrite: bool = False) -> Path:
    """Write ``model`` (or member ``member`` of ``es``) and ``tokenizer`` to the folder ``path``."""
    from .load import _quiet_transformers
    _quiet_transformers()
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    if member is not None and es is None:
        raise ValueError("member= needs es= (the strategy whose population it indexes)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with es.materialized(member) if member is not None else nullcontext():
            plain_weights(model).save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        info = {"format": "hyperscalees export 1", "member": member,
                "step": None if es is None else es.step,
                "evolved": None if es is None else list(es.strategy.trainable)}
        (tmp / "hyperscalees.json").write_text(json.dumps(info, indent=1) + "\n")
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
