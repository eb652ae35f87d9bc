"""SafeReward: a reward that raises, hangs past its timeout, returns NaN/inf/junk or kills its
process is scored worst and counted, and the wrapper keeps working; loading from
"module:function" and "file.py:function", and clear errors for bad paths; pickling."""
from __future__ import annotations

import math
import pickle
import textwrap
import time

import pytest

from hyperscalees.llm import RewardLoadError, SafeReward

USER_REWARD = textwrap.dedent("""
    import math, os, time

    def reward(prompt, completion):
        if completion == "raise":
            raise RuntimeError("the user's bug")
        if completion == "hang":
            time.sleep(60)
        if completion == "nan":
            return math.nan
        if completion == "inf":
            return -math.inf
        if completion == "junk":
            return "high"
        if completion == "die":
            os._exit(3)
        if completion == "exit":
            raise SystemExit(1)
        print("the user prints", prompt)   # must not break the worker's protocol
        return float(len(completion))

    class Scorer:
        @staticmethod
        def short(prompt, completion):
            return -float(len(completion))

    not_callable = 3
""")


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    (folder / "user_reward.py").write_text(USER_REWARD)
    (folder / "broken_reward.py").write_text("raise ImportError('missing dependency')\n")
    return folder / "user_reward.py"


@pytest.fixture(scope="module")
def safe(reward_file):
    with SafeReward(f"{reward_file}:reward", timeout=0.5) as r:
        yield r


def test_every_failure_scores_worst_is_counted_and_the_run_goes_on(safe):
    before = dict(safe.counts)
    completions = ["ok", "raise", "nan", "abc", "hang", "inf", "junk", "die", "exit", "abcd"]
    start = time.perf_counter()
    scores = safe.batch(["p"] * len(completions), completions)
    assert time.perf_counter() - start < 8.0  # one 0.5 s timeout and two restarts, not a 60 s hang
    assert scores == [2.0, -1.0, -1.0, 3.0, -1.0, -1.0, -1.0, -1.0, -1.0, 4.0]
    delta = {k: safe.counts[k] - before[k] for k in safe.counts}
    assert delta == {"calls": 10, "errors": 4, "timeouts": 1, "nonfinite": 2}  # raise, junk, die, exit
    assert safe("p", "hello") == 5.0  # works afterwards


@pytest.mark.parametrize("completion, kind, message", [
    ("raise", "errors", "RuntimeError: the user's bug"), ("hang", "timeouts", "0.5 s timeout"),
    ("nan", "nonfinite", "returned nan"), ("junk", "errors", "returned str 'high', not a number"),
    ("die", "errors", "worker died"),
])
def test_single_calls(safe, completion, kind, message):
    before = safe.counts[kind]
    assert safe("p", completion) == -1.0
    assert safe.counts[kind] == before + 1 and message in safe.last_error
    assert safe("p", "xy") == 2.0


def test_many_calls_are_fast(safe):
    safe("p", "warm")  # a worker is up
    start = time.perf_counter()
    scores = safe.batch(["p"] * 2000, ["abc"] * 2000)
    assert scores == [3.0] * 2000 and time.perf_counter() - start < 3.0  # ~0.1 s on an idle 2-core CPU


def test_module_function_path_and_dotted_attributes(reward_file, monkeypatch):
    monkeypatch.syspath_prepend(str(reward_file.parent))  # the worker gets this process's sys.path
    with SafeReward("user_reward:reward", timeout=2.0, worst=-10.0) as r:
        assert r("p", "abc") == 3.0 and r("p", "raise") == -10.0
    with SafeReward("user_reward:Scorer.short", timeout=2.0) as r:
        assert r("p", "abc") == -3.0


def test_relative_file_path(reward_file, monkeypatch):
    monkeypatch.chdir(reward_file.parent.parent)
    with SafeReward(f"{reward_file.parent.name}/user_reward.py:reward", timeout=2.0) as r:
        monkeypatch.chdir("/")  # resolved when built
        assert r("p", "abcd") == 4.0


@pytest.mark.parametrize("spec, match", [
    ("user_reward.reward", "must be 'package.module:function' or 'path/to/file.py:function'"),
    (":reward", "must be"),
    ("{folder}/nope.py:reward", "reward file '.*nope.py' .*does not exist"),
    ("no_such_module_xyz:reward", "cannot import module 'no_such_module_xyz'.*No module named"),
    ("{folder}/user_reward.py:missing", "has no attribute 'missing'"),
    ("{folder}/user_reward.py:not_callable", "'not_callable' in .* is not callable"),
    ("{folder}/broken_reward.py:reward", "running reward file .*broken_reward.py.* raised ImportError: missing dependency"),
])
def test_bad_paths_name_themselves(reward_file, spec, match):
    spec = spec.format(folder=reward_file.parent)
    with pytest.raises(RewardLoadError, match=match):
        SafeReward(spec)


def test_callables_and_isolation(reward_file, monkeypatch):
    monkeypatch.syspath_prepend(str(reward_file.parent))
    import user_reward  # a light module: the worker imports it to unpickle the function
    with SafeReward(user_reward.reward, timeout=2.0) as r:  # pickled by reference into the worker
        assert r.batch(["p", "p"], ["abc", "raise"]) == [3.0, -1.0]
    with pytest.raises(TypeError, match="isolation='thread'"):
        SafeReward(lambda p, c: 1.0)
    seen = []
    r = SafeReward(lambda p, c: seen.append(c) or len(c), isolation="thread", timeout=2.0)
    assert r.batch(["p", "p"], ["a", "bb"]) == [1.0, 2.0] and seen == ["a", "bb"]
    with pytest.raises(TypeError, match="callable or a path"):
        SafeReward(3)
    for bad in ({"timeout": 0}, {"timeout": math.inf}, {"worst": math.nan}, {"isolation": "fork"}):
        with pytest.raises(ValueError):
            SafeReward(user_reward.reward, **bad)


def test_thread_isolation_abandons_a_hung_call():
    import threading
    release = threading.Event()

    def reward(prompt, completion):
        if completion == "hang":
            release.wait(30)
        if completion == "raise":
            raise ValueError("no")
        return math.nan if completion == "nan" else 1.0

    r = SafeReward(reward, isolation="thread", timeout=0.3, worst=-5.0)
    assert r.batch(["p"] * 5, ["a", "hang", "raise", "nan", "b"]) == [1.0, -5.0, -5.0, -5.0, 1.0]
    assert r.counts == {"calls": 5, "errors": 1, "timeouts": 1, "nonfinite": 1}
    release.set()


def test_pickled_copy_rebuilds_from_its_path(safe, reward_file):
    copy = pickle.loads(pickle.dumps(safe))  # what a Ray worker receives
    try:
        assert copy.counts == safe.counts and copy("p", "abc") == 3.0 and copy("p", "raise") == -1.0
        assert copy.counts["errors"] == safe.counts["errors"] + 1
    finally:
        copy.close()
    gone = SafeReward(f"{reward_file}:reward")
    state = pickle.dumps(gone)
    gone.close()
    moved = pickle.loads(state.replace(b"user_reward.py", b"user_rewarX.py"))  # a worker without the file
    with pytest.raises(RewardLoadError, match="does not exist"):
        moved("p", "x")


def test_close_and_restart(reward_file):
    r = SafeReward(f"{reward_file}:reward", timeout=2.0)
    proc = r._runner.proc
    r.close()
    assert proc.poll() is not None  # the worker is gone
    assert r("p", "ab") == 2.0     # a new one starts
    r.close()
