"""A Ray cluster of several nodes on this machine, started as the docs' recipe starts one.

A head and further nodes come from the real ``ray start`` commands (one CPU each, so every worker
lands on its own node), with token authentication on. The tests run the recipe from
docs/guide/backends.md as written, kill a node while one of its workers is mid-chunk, and add a
node mid-run; each run's weights are compared bit for bit with an uninterrupted local run.

Every process a test starts carries ``HS_CLUSTER=<this module's mark>`` in its environment (Ray's
daemons and workers inherit it), so teardown kills exactly those, never another user's Ray
(``ray stop`` would stop every Ray on the machine).
"""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

import hyperscalees as hs
from hyperscalees.cli.main import main
from hyperscalees.distributed import LocalBackend, RayBackend, RayConfig
from hyperscalees.distributed.ray_checks import auth_refused
from hyperscalees.distributed.replica import Replica
from kept_environ import environ_kept
from cli_runs import assert_same_params as assert_same, params

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
RAY = str(Path(sys.executable).parent / "ray")
MARK = uuid.uuid4().hex[:12]
pytestmark = pytest.mark.xdist_group("ray")  # with --dist loadgroup (make test) one worker runs them all: one Ray


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes(key: str, value: str) -> dict[int, str]:
    """Process id -> command line of the living processes whose environment holds ``key=value`` (and, for a
    node's, this module's cluster mark: another test run on the same machine has nodes of the same names)."""
    found, needles = {}, {f"{key}={value}".encode()} | ({f"HS_CLUSTER={MARK}".encode()} if key == "HS_NODE" else set())
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if needles <= set((d / "environ").read_bytes().split(b"\0")) and (d / "stat").read_text().split()[2] != "Z":
                found[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found


def kill(key: str, value: str) -> None:
    for pid in processes(key, value):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class Cluster:
    """Nodes started with ``ray start`` in a private HOME (its ~/.ray/auth_token) and temp dir."""

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="hsh", dir="/tmp")
        self.temp = tempfile.mkdtemp(prefix="hsc", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.token = None
        self.env = {**os.environ, "HOME": self.home, "HS_CLUSTER": MARK, "RAY_USAGE_STATS_ENABLED": "0",
                    "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    # a killed node is declared dead within ~3 s (Ray's default: ~30 s): its port refuses
                    # the GCS's checks at once, one a second, three in a row. A live node answers within
                    # 10 s even on a loaded 2-core machine; a 1 s deadline there had a node declared dead
                    # (and its raylet quit) in the middle of a test that killed nothing
                    "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "10000",
                    "RAY_health_check_failure_threshold": "3"}
        for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
            self.env.pop(k, None)

    def command(self, line: str, node: str, extra: dict | None = None) -> tuple[list[str], dict]:
        """One line of the docs' recipe, for this machine: A_IP is 127.0.0.1, the port and token are
        this cluster's, every node has one CPU (the test's flags are added, none of the recipe's dropped)."""
        line = line.split("#", 1)[0].replace("A_IP:6379", self.address).replace("6379", str(self.port))
        words = shlex.split(line.replace("=TOKEN", f"={self.token}"))
        env = dict(self.env, HS_NODE=node)
        while "=" in words[0]:
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        if words[:2] == ["ray", "start"]:
            words += ["--num-cpus", "1", "--disable-usage-stats", "--ray-client-server-port", str(free_port()),
                      "--dashboard-agent-listen-port", str(free_port())]
            if "--head" in words:
                words += ["--temp-dir", self.temp, "--include-dashboard=false"]
        if words[0] == "ray":
            words[0] = RAY
        elif words[0] == "hyperscalees":
            words[:1] = [sys.executable, "-m", "hyperscalees"]
        env.update(extra or {})
        return words, env

    def run(self, line: str, node: str = "driver", timeout: float = 120, **extra) -> subprocess.CompletedProcess:
        words, env = self.command(line, node, extra)
        try:
            done = subprocess.run(words, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # say why: the driver's own words and every raylet's last
            said = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise AssertionError(f"{line}\ntimed out after {timeout:g} s; its stderr:\n{said[-6000:]}\n"
                                 f"{self.raylet_logs()}") from None
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
        return done

    def raylet_logs(self, lines: int = 20) -> str:
        """The last ``lines`` of every raylet and GCS log of this cluster (what a failure message needs:
        why a node died is written there, and the temp dir goes when the cluster closes)."""
        out = []
        for log in sorted(Path(self.temp).glob("session_*/logs/*")):
            if log.name.startswith(("raylet", "gcs_server")) and log.suffix in (".out", ".err"):
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out) or f"(no raylet logs under {self.temp})"

    def node_id(self, node: str) -> str:
        """The Ray node id of ``node`` (its raylet's --node_id)."""
        for cmdline in processes("HS_NODE", node).values():
            m = re.search(r"/raylet/raylet .*--node_id=([0-9a-f]+)", cmdline)
            if m:
                return m.group(1)
        raise AssertionError(f"no raylet for node {node}")

    def add_node(self, name: str) -> str:
        self.run(recipe_lines()[2], node=name)
        return self.node_id(name)

    def close(self) -> None:
        kill("HS_CLUSTER", MARK)
        for _ in range(50):
            if not processes("HS_CLUSTER", MARK):
                break
            time.sleep(0.1)
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.temp, ignore_errors=True)


def recipe_lines() -> list[str]:
    """The docs' multi-machine recipe: the bash block after "On several machines"."""
    text = (ROOT / "docs" / "guide" / "backends.md").read_text()
    block = text.split("On several machines", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    c = Cluster()
    try:
        lines = recipe_lines()
        c.token = c.run(lines[0], node="head").stdout.strip().splitlines()[-1]
        c.run(lines[1], node="head")
        yield c
    finally:
        with contextlib.suppress(Exception):
            import ray
            ray.shutdown()
        c.close()


@pytest.fixture
def driver(cluster):
    """This process as a driver of the cluster: its HOME (the token), token mode on; as before afterwards
    (Ray reads the mode and the token once per process: both are read again, each way)."""
    from ray._raylet import AuthenticationTokenLoader, Config
    with environ_kept("HOME", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "HS_CLUSTER"):
        os.environ.update(HOME=cluster.home, RAY_AUTH_MODE="token", HS_CLUSTER=MARK)
        os.environ.pop("RAY_AUTH_TOKEN", None)
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        try:
            yield cluster
        finally:
            import ray
            ray.shutdown()
    Config.initialize("")  # the mode and token as they were, read again
    AuthenticationTokenLoader.instance().reset_cache()


# -- a small task of this file's own (pickled by value: Ray workers cannot import a test module) --
class Xor:
    X = torch.tensor([[0., 0], [0, 1], [1, 0], [1, 1]])
    Y = torch.tensor([[0.], [1], [1], [0]])

    def __call__(self, model, lo, hi, step):
        out = model(self.X.repeat(hi - lo, 1)).view(hi - lo, 4, 1)
        return -((out - self.Y) ** 2).mean(dim=(1, 2))


def recipe():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    return hs.EGGROLL(model, population=64, sigma=0.1, lr=0.05, seed=0), Xor()


class StallOnNode(Replica):
    """Stalls (writes its pid to MARKER, then sleeps) on its first chunk of step STEP when it runs on NODE."""
    NODE, STEP, MARKER = "", 0, ""

    def evaluate(self, step, lo, hi):
        import ray
        if step == self.STEP and ray.get_runtime_context().get_node_id() == self.NODE:
            # whole (the killer must never read it empty), through a file of this process's own: a group's
            # two workers on NODE can reach step STEP together, and a shared temporary name had the second
            # one's os.replace find it already moved (FileNotFoundError, a CI failure of 2026-11-30)
            tmp = f"{self.MARKER}.{os.getpid()}.tmp"
            Path(tmp).write_text(str(os.getpid()))
            os.replace(tmp, self.MARKER)
            time.sleep(120)
        return super().evaluate(step, lo, hi)


def kill_the_node_once_stalled(marker: Path, node: str) -> tuple[dict, threading.Thread]:
    """A thread that waits (up to 120 s) for a StallOnNode worker's marker, then SIGKILLs ``node``'s raylet;
    ``killed`` gets the stalled worker's pid ("worker") and the time of the kill ("raylet")."""
    killed = {}

    def killer():
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if marker.exists():
            killed["worker"] = int(marker.read_text())
        for pid, cmdline in processes("HS_NODE", node).items():
            if "/raylet/raylet " in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed["raylet"] = time.monotonic()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    return killed, thread


def by_value():
    import ray.cloudpickle as cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def local_weights(steps: int, chunk: int) -> dict:
    with LocalBackend(recipe, chunk=chunk) as local:
        for _ in range(steps):
            local.step()
        return {k: v.clone() for k, v in local.model.state_dict().items()}


def test_auth_refusal_is_one_line():
    """No Ray needed: what a refused driver is told names the variables and the command."""
    line = auth_refused("10.0.0.1:6379", token_mode=False)
    assert "RAY_AUTH_MODE=token" in line and "RAY_AUTH_TOKEN" in line and "ray get-auth-token" in line
    line = auth_refused("auto", token_mode=True)
    assert "refused this machine's token" in line and "RAY_AUTH_TOKEN" in line and "\n" not in line


def test_max_workers_below_workers_is_refused_and_slots_follow_it():
    with pytest.raises(ValueError, match=r"max_workers must be >= workers \(3\), got 2"):
        RayConfig(workers=3, max_workers=2)
    assert RayConfig(workers=2).slots == 2 and RayConfig(workers=2, max_workers=5).slots == 5


def test_the_docs_recipe_runs_on_two_nodes_bit_identical_to_a_local_run(cluster, tmp_path, capsys, no_plot):
    """Head and a second node from the docs' `ray start` lines, then its `train` line: one worker on
    each node (the chunks each node's actor returned, by node id), the local run's weights bit for bit;
    without RAY_AUTH_MODE, or with a wrong token, the driver is refused in one line within seconds."""
    second = cluster.add_node("second")
    lines = recipe_lines()
    train = lines[3].split("#", 1)[0].rstrip().replace("--workers 8", "--workers 2").replace("runs/digits", str(tmp_path / "ray"))
    small = " --steps 3 --seed 7 --population 256 --json"
    done = cluster.run(train + small)
    report = json.loads(done.stdout)["backend"]
    assert report["workers"] == 2, report
    assert len(report["chunks_by_node"]) == 2 and second in report["chunks_by_node"], (report, second)  # both nodes
    code = main(["train", "digits", "--out", str(tmp_path / "local")] + small.split())
    assert code == 0, capsys.readouterr().err
    assert_same(params(tmp_path / "ray"), params(tmp_path / "local"))

    train = train.replace(str(tmp_path / "ray"), str(tmp_path / "refused"))
    bare = train.replace("RAY_AUTH_MODE=token ", "") + small
    for line, want in ((bare, "requires token authentication"), (train + small, "refused this machine's token")):
        words, env = cluster.command(line, "driver", {"RAY_AUTH_TOKEN": "0" * 64} if "MODE" in line else None)
        t0 = time.monotonic()
        done = subprocess.run(words, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and time.monotonic() - t0 < 30, done.stderr[-2000:]
        assert done.stderr.strip().splitlines() == [f"hyperscalees train digits: error: "
                                                    f"{auth_refused(cluster.address, 'MODE' in line)}"], done.stderr
        assert want in done.stderr and not (tmp_path / "refused").exists()
    kill("HS_NODE", "second")                       # gone: later tests start their own


def test_a_node_killed_mid_step_loses_nothing(driver, tmp_path):
    """The second node's raylet is SIGKILLed while its worker is inside a chunk of step 3: its worker
    process dies with it, the chunk runs again on the head's worker, the run goes on with one worker
    (its replacement waits in Ray's queue: not waited for) and ends with the local run's weights."""
    by_value()
    # the head alone first: a node an earlier test killed, not yet declared dead, once took worker 1 (which
    # died on it) while the head's CPU was still held, and its replacement found no CPU (CI, 2026-11-29)
    only_the_head_alive(driver)
    node = driver.add_node("doomed")
    marker = tmp_path / "stalled"
    replica = type("Stall", (StallOnNode,), {"NODE": node, "STEP": 3, "MARKER": str(marker)})
    steps, chunk = 8, 16
    killed, thread = kill_the_node_once_stalled(marker, "doomed")
    backend = RayBackend(recipe, RayConfig(workers=2, address=driver.address, straggler_timeout=5.0, hash_every=1),
                         chunk=chunk, replica=replica)
    with backend:
        for _ in range(steps):
            backend.step()
        got = {k: v.clone() for k, v in backend.model.state_dict().items()}
        report = backend.report()
    thread.join(5)
    assert "raylet" in killed, "step 3 never ran on the second node"
    assert report["restarts"] >= 1 and report["requeued"] + report["reissued"] >= 1, report
    assert report["chunks_by_node"].get(node, 0) > 0, report
    assert any(n != node and k > 0 for n, k in report["chunks_by_node"].items()), report  # the head went on
    assert backend.step_times[3] < 60, backend.step_times        # not the stall: the node's death ended it
    assert max(backend.step_times[s] for s in range(5, steps)) < 5.0, backend.step_times  # nor its replacement
    for _ in range(100):                                          # the raylet's death took its worker along
        if not Path(f"/proc/{killed['worker']}").exists() or \
                Path(f"/proc/{killed['worker']}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"worker {killed['worker']} outlived its raylet")
    assert_same(got, local_weights(steps, chunk))
    kill("HS_NODE", "doomed")


def only_the_head_alive(driver, timeout: float = 60.0) -> str:
    """Wait until the nodes earlier tests started (and killed) are gone from the cluster and the head's
    CPU is free: the precondition "the head alone" (an earlier node not yet declared dead, or an actor of
    an earlier test still holding the head's CPU, would take the first worker elsewhere)."""
    import ray
    for name in ("second", "doomed"):
        kill("HS_NODE", name)
    ray.init(address=driver.address, logging_level="ERROR")
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = [n for n in ray.nodes() if n["Alive"]]
            if len(alive) == 1 and "node:__internal_head__" in alive[0]["Resources"] \
                    and ray.available_resources().get("CPU", 0) >= 1:
                return alive[0]["NodeID"]   # Ray's own word for the head (a raylet's command line may be another run's)
            time.sleep(0.5)
        alive = [n["NodeID"] for n in alive]
        raise AssertionError(f"earlier nodes still alive or the head busy: {alive}, {ray.available_resources()}")
    finally:
        ray.shutdown()


def test_a_node_added_mid_run_is_used_from_the_next_step(driver):
    """workers=1, max_workers=2 on the head alone: the second actor waits in Ray's queue. A node joins
    after step 2: Ray starts the actor there, it loads the coordinator's state of that moment (steps
    went by meanwhile), and from the step after it is up it takes chunks; the weights equal the local run's."""
    by_value()
    head = only_the_head_alive(driver)
    chunk = 16
    backend = RayBackend(recipe, RayConfig(workers=1, max_workers=2, address=driver.address, hash_every=1,
                                           straggler_timeout=10.0), chunk=chunk)   # its first chunk is its own
    with backend:
        for _ in range(2):
            backend.step()
        assert len(backend.ready) == 1 and set(backend.report()["chunks_by_node"]) == {head}
        (late,) = {0, 1} - backend.ready
        node = driver.add_node("joined")
        deadline, up_at = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            if up_at is None and backend.ready == {0, 1}:
                up_at = backend.es.step
            backend.step()
            if up_at is not None:
                break
        report = backend.report()
        steps = backend.es.step
        got = {k: v.clone() for k, v in backend.model.state_dict().items()}
    assert up_at is not None, f"the second worker never came up on the new node: {report}"
    assert backend.node_of[late] == node
    assert report["chunks_by_node"].get(node, 0) > 0, report        # the step after it was up
    assert report["drift_repairs"] == report["rejected"] == 0, report  # queued updates kept it exact
    assert_same(got, local_weights(steps, chunk))
    kill("HS_NODE", "joined")


@pytest.mark.parametrize("shared", [False, True], ids=["own_weights", "shared_replay"])
def test_a_node_killed_mid_step_under_group_coordinators_loses_nothing(driver, tmp_path, shared):
    """Two groups of two workers (each group reserves one CPU: one group a node). The second node's raylet
    is SIGKILLed while a worker of its group is inside a chunk of step 3: the group's coordinator and
    workers die with it, the driver re-queues the group's chunk on the head's group, and the run ends
    with the local run's weights. The same with each group's workers sharing one copy of the weights on
    their node (``shared_replay``: each group its own file, the dead node's left behind)."""
    by_value()
    head = only_the_head_alive(driver)
    node = driver.add_node("doomed")
    marker = tmp_path / "stalled"
    replica = type("Stall", (StallOnNode,), {"NODE": node, "STEP": 3, "MARKER": str(marker)})
    steps, chunk = 6, 16
    killed, thread = kill_the_node_once_stalled(marker, "doomed")
    config = RayConfig(workers=4, group_size=2, cpus_per_worker=0.5, address=driver.address, straggler_timeout=5.0,
                       hash_every=1, shared_replay=shared)
    with RayBackend(recipe, config, chunk=chunk, replica=replica) as backend:
        for _ in range(steps):
            backend.step()
        got = {k: v.clone() for k, v in backend.model.state_dict().items()}
        report = backend.report()
        groups_on = sorted(backend.node_of.values())
    thread.join(5)
    assert "raylet" in killed, "step 3 never ran on the second node"
    assert report["chunks_by_node"].get(node, 0) > 0 and report["chunks_by_node"].get(head, 0) > 0, report
    assert report["restarts"] >= 1 and report["requeued"] + report["reissued"] >= 1, report
    assert head in groups_on, groups_on
    assert_same(got, local_weights(steps, chunk))
    kill("HS_NODE", "doomed")
