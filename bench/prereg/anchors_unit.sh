#!/usr/bin/env bash
# One unit of the anchors study's reported runs (llm_prereg_anchors.md, amendments 1-3), as the sessions
# run them: `bash bench/prereg/anchors_unit.sh sub SEED` (an es_sub run, pinned to core 0: the other core
# takes only untimed work) or `bash bench/prereg/anchors_unit.sh pairs SEED` (an es_full/grpo pair side by
# side, the whole machine, nothing else running). From amendment 2's checkout (d66e86f, a detached
# worktree made here if missing) with this checkout's virtualenv; each record lands in
# bench/results/cpu/llm_prereg_anchors_runs/{sub,pairs}/ and is to be committed as soon as it is written.
# A record already there is read back, not run again (src/hyperscalees/benchmarks/run_store.py), so once
# every seed is in, the same command with `--seeds 301 302 303 --out FILE` (FILE an absolute path: the
# command runs in the worktree; arguments after the seed go
# to bench/llm_vs_grpo.py) writes the unit's whole table for bench/prereg_result.py without training.
set -euo pipefail
kind=${1:?sub or pairs}; seed=${2:?a reported seed: 301, 302 or 303}; shift 2
main=$(cd "$(dirname "$0")/../.." && pwd)
wt=${ANCHORS_WORKTREE:-/work/wt/anchors}
[ -d "$wt" ] || git -C "$main" worktree add --detach "$wt" d66e86f
py=$main/.venv/bin/python
model=$("$py" -c "import hyperscalees.llm as l; print(l.smollm2_path())")
chat='<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n'
opts='{"min_steps": 1, "max_steps": 1, "max_number": 9, "template": "'"$chat"'"}'
common=(--model "$model" --task arithmetic --task-options "$opts" --seeds "$seed" --budget 3600 --held-out pooled
        --snapshot-every 1800 --max-new-tokens 48 --json --runs-dir "$main/bench/results/cpu/llm_prereg_anchors_runs/$kind" "$@")
cd "$wt"
case $kind in
  sub)
    arms='{"es_sub": {"method": "es", "settings": {"preset": "qiu", "population": 30, "prompts": 16, "train_problems": 16, "subspace": 4096, "subspace_cache_mib": 1024, "chunk": 2, "sigma": 0.001, "lr": 5e-07}}}'
    OMP_NUM_THREADS=1 PYTHONPATH="$wt/src" exec taskset -c 0 "$py" bench/llm_vs_grpo.py --arms "$arms" "${common[@]}" ;;
  pairs)
    arms='{"es_full": {"method": "es", "settings": {"preset": "qiu", "population": 30, "prompts": 16, "train_problems": 16, "strategy": "eggroll", "chunk": 30}}, "grpo": {"method": "grpo", "settings": {"prompts": 16, "learning_rate": 3e-05}}}'
    OMP_NUM_THREADS=1 PYTHONPATH="$wt/src" exec "$py" bench/llm_vs_grpo.py --arms "$arms" --side-by-side "${common[@]}" ;;
  *) echo "anchors_unit.sh: the first argument must be sub or pairs, got '$kind'" >&2; exit 2 ;;
esac
