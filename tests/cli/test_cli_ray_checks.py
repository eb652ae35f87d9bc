"""Ray settings that cannot work are refused in one line before Ray starts (issue 19, item 8).

Before: a bad --address hung in Ray's start-up retrying for minutes (deaf to Ctrl-C),
--gpus-per-worker on a CPU-only machine waited 300 s printing to stdout, --dashboard without
its packages failed with a 30-line traceback. None of these tests starts Ray.
"""
import json
import socket
import time

import pytest
import torch

from hyperscalees.distributed import ray_checks
from hyperscalees.distributed.ray_checks import check_reachable, parse_address
from hyperscalees.tasks import XorTask

from cli_helpers import invoke

TRAIN = ["train", "xor", "--population", "8", "--steps", "2", "--backend", "ray"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]     # nothing listens once the socket is closed


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:0", "localhost", ":6379", "host:port", "ray://"])
def test_malformed_addresses_are_named(address):
    with pytest.raises(ValueError, match=f"invalid --address '{address}'"):
        parse_address(address)


def test_well_formed_addresses_parse():
    assert parse_address("auto") is None
    assert parse_address("10.0.0.2:6379") == ("10.0.0.2", 6379)
    assert parse_address("ray://head:10001") == ("head", 10001)
    assert parse_address("[::1]:6379") == ("::1", 6379)


def test_an_address_where_nothing_listens_fails_at_once(capsys):
    port = closed_port()
    with pytest.raises(ValueError, match=f"no Ray cluster at --address 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    t0 = time.perf_counter()
    code, out, err = invoke(TRAIN + ["--address", f"127.0.0.1:{port}"], capsys)
    assert code == 2 and time.perf_counter() - t0 < 10
    assert len(err.strip().splitlines()) == 1 and "no Ray cluster" in err and out == ""


def test_a_port_out_of_range_exits_2_in_one_line(capsys):
    code, _, err = invoke(TRAIN + ["--address", "127.0.0.1:99999"], capsys)
    assert code == 2 and "invalid --address '127.0.0.1:99999'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpus_per_worker_without_a_gpu_is_refused_at_once(capsys):
    t0 = time.perf_counter()
    code, out, err = invoke(TRAIN + ["--gpus-per-worker", "1"], capsys)
    assert code == 2 and time.perf_counter() - t0 < 10 and out == ""
    assert "--gpus-per-worker 1: this machine has no GPU" in err and len(err.strip().splitlines()) == 1


def test_dashboard_without_its_packages_is_refused_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(ray_checks, "missing_dashboard_modules", lambda: ["aiohttp", "pydantic"])
    code, out, err = invoke(TRAIN + ["--dashboard"], capsys)
    assert code == 2 and out == ""
    assert "--dashboard needs Ray's dashboard packages, missing here: aiohttp, pydantic" in err
    assert len(err.strip().splitlines()) == 1


def test_with_json_stdout_is_the_summary_alone(capsys, monkeypatch):
    """What runs during training (Ray's forwarded worker output, here a task) prints to stderr."""
    real = XorTask.fitness

    def chatty(self, model, lo, hi, step=0):
        print("worker chatter")
        return real(self, model, lo, hi, step)

    monkeypatch.setattr(XorTask, "fitness", chatty)
    code, out, err = invoke(["train", "xor", "--population", "8", "--steps", "2", "--json"], capsys)
    assert code == 0 and len(out.splitlines()) == 1 and json.loads(out)["steps"] == 2
    assert "worker chatter" in err
