"""Issue #20's egg lever: how far a bigram start gets, and what ES then does to it.

Usage:
    PYTHONPATH=src python bench/egg_bigram.py start               # test bpb of random vs bigram starts (D=32, 64)
    PYTHONPATH=src python bench/egg_bigram.py ranks               # float rank-k bigram test bpb (k = 16, 32, 64)
    PYTHONPATH=src python bench/egg_bigram.py train HIDDEN LR HEAD_LR MINUTES [ES_JSON]
        # ES from the bigram start for MINUTES; the embedding and head get their own lr (HEAD_LR)

Everything scores the whole test split (``LMTask.final_evaluate``); nothing here is tuned on it.
"""
from __future__ import annotations

import json
import math
import sys

import torch

from hyperscalees.distributed import LocalBackend
from hyperscalees.engine import make_config, run
from hyperscalees.models.bigram_init import bigram_log2, init_from_bigram
from hyperscalees.tasks import get_task
from hyperscalees.tasks.lm.task import LMTask


def starts() -> None:
    for hidden in (32, 64):
        for init in ("random", "bigram"):
            task = get_task("lm")(seed=0, options={"model": "egg", "hidden": hidden, "init": init})
            print(json.dumps({"hidden": hidden, "init": init, **task.final_evaluate(task.build_model())}), flush=True)


def ranks() -> None:
    """Test bpb of the train split's bigram log-odds cut to rank k by an SVD, in float: what the token ->
    logits path of a width-k model can hold at best."""
    task = get_task("lm")(seed=0, options={"model": "egg"})
    log2p, _ = bigram_log2(task.corpus.train, task.corpus.vocab_size)
    centred = log2p - log2p.mean(1, keepdim=True)
    u, s, vh = torch.linalg.svd(centred)
    streams = list(task.test_streams())
    for k in (16, 32, 64, task.corpus.vocab_size):
        table = (u[:, :k] * s[:k]) @ vh[:k]
        bits = count = 0.0
        for x in streams:
            prev, nxt = x[:, :-1].long(), x[:, 1:].long()
            logp = torch.log_softmax(table[prev] * math.log(2), -1).gather(-1, nxt[..., None])[..., 0]
            bits, count = bits - float(logp.sum()) / math.log(2), count + nxt.numel()
        print(json.dumps({"rank": k, "test_bpt": bits / count}), flush=True)  # byte vocabulary: bpt = bpb


def train(hidden: int, lr: float, head_lr: float, minutes: float, es: dict) -> None:
    own = LMTask.es_options

    def es_options(self, model):  # the embedding and head: their own lr (they hold the bigram)
        groups = own(self, model).get("groups", [])
        return {"groups": groups + [{"params": ["embed.weight", "head.weight"], "lr": head_lr, "name": "bigram"}]}

    LMTask.es_options = es_options
    cfg = make_config("lm", es={"lr": lr, **es}, engine={"time_budget": 60 * minutes, "steps": 10**6,
                                                        "eval_every": 250, "json": True},
                      options={"model": "egg", "hidden": hidden, "init": "bigram", "sample_every": 0})
    summary = run(cfg, LocalBackend)
    print(json.dumps({"hidden": hidden, "lr": lr, "head_lr": head_lr, "minutes": minutes, "es": es,
                      "steps": summary["steps"], **summary["metrics"]}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    what = sys.argv[1] if len(sys.argv) > 1 else "start"
    if what == "start":
        starts()
    elif what == "ranks":
        ranks()
    elif what == "train":
        a = sys.argv[2:]
        train(int(a[0]), float(a[1]), float(a[2]), float(a[3]), json.loads(a[4]) if len(a) > 4 else {})
    else:
        raise SystemExit(__doc__)
