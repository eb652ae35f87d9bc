"""EGGROLL and OpenES seconds per member at T = 1, d = 1024: bench throughput's own code, cut to that row.

Used by issue 39's before/after (bench/results/cpu/issue39_before_after_2026-11-28.txt) to find which side
of the T = 1 ratio moved between commits: run it with PYTHONPATH pointing at each tree's src/.

    PYTHONPATH=OTHER_TREE/src python bench/t1_ratio.py --threads 2
"""
import argparse
import json

import torch

import hyperscalees.benchmarks.throughput as tp

FIELDS = ("model", "eggroll_s_member", "openes_s_member", "eggroll_over_openes", "es_over_inference")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args()
    full = tp.configs

    def only_t1(quick):
        c = full(quick)
        c.update(widths=(1024,), shapes=((1, 4096),), memory=False)
        return c
    tp.configs = only_t1
    torch.set_num_threads(args.threads)
    rep = tp.run(quick=False, device="cpu", log=lambda m: None)
    rows = [dict(zip(tp.COLUMNS, r)) for r in rep.rows]
    print(json.dumps({"tree": tp.__file__, "threads": torch.get_num_threads(),
                      "rows": [{k: r.get(k) for k in FIELDS} for r in rows]}))


if __name__ == "__main__":
    main()
