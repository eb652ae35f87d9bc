"""Every action a policy sends is valid in its environment's action space (issue 19, items 1 and 2).

Before per-dimension bounds, Box([-1, -10], [1, 10]) got dimension-0 actions in [-10, 10],
an unbounded Box NaN, MultiBinary was driven as Discrete and Discrete's ``start`` was ignored.
"""
import numpy as np
import pytest
import torch

from hyperscalees.models.action_head import ActionHead, ActionSpec
from hyperscalees.models.policy import Policy
from hyperscalees.tasks.rl import RLTask

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces
INF = np.inf


class RecordingEnv(gym.Env):
    """A 5-step episode that records whether each action it is sent is in its action space."""

    seen: list = []

    def __init__(self, action_space):
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        RecordingEnv.seen.append((np.array(action, copy=True), bool(self.action_space.contains(action))))
        self.t += 1
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), 1.0, self.t >= 5, False, {}


SPACES = {
    "box-per-dim": spaces.Box(np.array([-1, -10], np.float32), np.array([1, 10], np.float32)),
    "box-unbounded": spaces.Box(-INF, INF, (2,), np.float32),
    "box-half": spaces.Box(np.array([-1, 0, -INF], np.float32), np.array([1, INF, 3], np.float32)),
    "box-wide": spaces.Box(np.float32(-3e38), np.float32(3e38), (1,), np.float32),
    "discrete-start": spaces.Discrete(3, start=-1),
    "multi-binary": spaces.MultiBinary(3),
    "multi-discrete": spaces.MultiDiscrete([2, 3, 4], start=[0, -1, 5]),
}


@pytest.fixture
def env_id(request):
    name = f"hstest/Actions-{request.param}-v0"
    gym.register(id=name, entry_point=RecordingEnv, kwargs={"action_space": SPACES[request.param]})
    RecordingEnv.seen = []
    yield name
    del gym.registry[name]


@pytest.mark.parametrize("env_id", list(SPACES), indirect=True)
def test_every_action_sent_is_in_the_action_space(env_id):
    task = RLTask(seed=0, options={"env": env_id, "eval_episodes": 2})
    model = task.build_model()
    with torch.no_grad():
        for scale in (1.0, 1e3):     # large weights push every output to its extremes
            for p in model.actor.parameters():
                p.mul_(scale)
            task.fitness(model, 0, 6, step=0)
    assert len(RecordingEnv.seen) == 2 * 6 * 5
    bad = [a for a, ok in RecordingEnv.seen if not ok]
    assert not bad, f"{len(bad)} invalid actions, e.g. {bad[:3]}"


def test_box_dimensions_keep_their_own_bounds():
    head = ActionHead(ActionSpec.box([-1, -10, 0, -INF], [1, 10, INF, INF]))
    x = torch.tensor([[-50.0, -50.0, -50.0, -50.0], [0.0, 0.0, 0.0, 0.0], [50.0, 50.0, 50.0, 50.0]])
    a = head(x)
    assert a[:, 0].tolist() == [-1.0, 0.0, 1.0]
    assert a[:, 1].tolist() == [-10.0, 0.0, 10.0]
    assert float(a[0, 2]) >= 0 and float(a[2, 2]) == pytest.approx(50.0)   # [0, inf): 0 + softplus(x)
    assert a[:, 3].tolist() == [-50.0, 0.0, 50.0]                           # unbounded: the output itself


def test_a_policy_saved_with_scalar_bounds_still_loads():
    policy = Policy(3, ActionSpec.box([-2.0], [2.0]))
    state = {k: v for k, v in policy.state_dict().items() if not k.startswith("head.")}
    state.update(low=torch.tensor(-2.0), high=torch.tensor(2.0))          # the layout before issue 19
    Policy(3, ActionSpec.box([-2.0], [2.0])).load_state_dict(state)


def test_unsupported_action_spaces_are_refused_by_name():
    name = "hstest/Actions-tuple-v0"
    gym.register(id=name, entry_point=RecordingEnv,
                 kwargs={"action_space": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))})
    try:
        with pytest.raises(ValueError, match="Tuple actions are not supported"):
            RLTask(options={"env": name})
    finally:
        del gym.registry[name]
