"""GPU workers (issue 41): Ray worker actors that reserve a share of a GPU (``--gpus-per-worker``) and
evaluate their chunks on it. Skipped without CUDA; a lent GPU runs them (``bash bench/gpu_session.sh ray``).

Two workers share the machine's one GPU (0.5 each). A worker that did not get the GPU cannot build its
replica at all (``--device cuda`` is refused where CUDA is hidden), so a run that ends says the workers ran
on the GPU; its weights must equal the in-process CUDA run's bit for bit (the same kernels on the same
chunks, only in other processes).
"""
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hyperscalees.distributed import LocalBackend, RayConfig
from hyperscalees.engine import make_config, run

from kept_environ import ray_home
from cli_runs import assert_same_params as assert_same, invoke, params

pytestmark = [pytest.mark.xdist_group("ray"),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU workers need CUDA")]


@pytest.fixture(scope="module")
def gpu_ray():
    ray = pytest.importorskip("ray")
    from hyperscalees.distributed.ray import start_ray
    home = tempfile.mkdtemp(prefix="hsh", dir="/tmp")
    temp = tempfile.mkdtemp(prefix="hsr", dir="/tmp")
    with ray_home(home):
        assert start_ray(RayConfig(workers=2, temp_dir=temp))
        assert ray.cluster_resources().get("GPU", 0) >= 1, ray.cluster_resources()
        yield ray
        ray.shutdown()
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(temp, ignore_errors=True)


def test_two_workers_sharing_the_gpu_equal_the_in_process_cuda_run(gpu_ray, tmp_path, capsys, no_plot):
    code, out, err = invoke(["train", "xor", "--steps", "20", "--seed", "7", "--device", "cuda", "--backend", "ray",
                             "--workers", "2", "--gpus-per-worker", "0.5", "--out", str(tmp_path / "ray"),
                             "--json"], capsys)
    assert code == 0, err
    assert '"backend": {"workers": 2' in out
    cfg = make_config("xor", es={"seed": 7}, engine={"steps": 20, "device": "cuda", "out": str(tmp_path / "local")})
    run(cfg, LocalBackend)
    got = params(tmp_path / "ray")
    assert_same(got, params(tmp_path / "local"))
    run(make_config("xor", es={"seed": 7}, engine={"steps": 1, "device": "cuda", "out": str(tmp_path / "one")}),
        LocalBackend)
    one = params(tmp_path / "one")
    assert any(not torch.equal(one[k], got[k]) for k in got), "19 more steps moved nothing"


def test_llm_population_generation_on_gpu_workers_equals_the_in_process_cuda_run(gpu_ray, tmp_path, capsys,
                                                                                 no_plot):
    """``train llm --device cuda`` on two GPU workers: each loads the tiny Llama onto its GPU share and
    generates its chunk of members' answers; two steps' weights equal the in-process CUDA run's."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))
    from tiny import save
    folder = str(save("llama", tmp_path / "llama"))
    argv = ["train", "llm", "--model", folder, "--task", "arithmetic", "--device", "cuda", "--prompts", "2",
            "--max-new-tokens", "8", "--eval-prompts", "4", "--population", "8", "--sigma", "0.05", "--lr", "0.01",
            "--steps", "2", "--chunk", "4", "--json"]
    code, _, err = invoke(argv + ["--out", str(tmp_path / "local")], capsys)
    assert code == 0, err
    code, out, err = invoke(argv + ["--backend", "ray", "--workers", "2", "--gpus-per-worker", "0.5",
                                    "--out", str(tmp_path / "ray")], capsys)
    assert code == 0, err
    assert '"backend": {"workers": 2' in out
    got = params(tmp_path / "ray")
    assert_same(got, params(tmp_path / "local"))
    start = load_file(str(Path(folder) / "model.safetensors"))
    assert any(not torch.equal(start[k], got[k].cpu()) for k in start if k in got), "two steps moved nothing"
