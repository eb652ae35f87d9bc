"""Help that helps (issue 39): examples at the end, the task's options first, no reST markup, a
start-here list at the top, llm's --task-options keys, and no --trainer backprop where it is refused."""
import pytest

from hyperscalees.tasks import TASKS
from hyperscalees.tasks.problems import PROBLEM_SETS

from cli_helpers import invoke

COMMANDS = [["train"], ["eval"], ["env"], ["generate"], ["arch"], ["coord-check"]] + [["train", t] for t in TASKS]


def help_of(argv, capsys) -> str:
    code, out, err = invoke([*argv, "--help"], capsys)
    assert code == 0, err
    return out


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_help_ends_with_examples_and_shows_no_markup(argv, capsys):
    out = help_of(argv, capsys)
    tail = out.rstrip().split("\n\n")[-1]
    assert tail.startswith("examples:") and "hyperscalees " in tail
    assert "``" not in out and "module docstring" not in out and ":class:" not in out


def test_top_level_help_says_where_to_start(capsys):
    out = help_of([], capsys)
    assert "start here:" in out and "hyperscalees train xor" in out and "train digits --help" in out


@pytest.mark.parametrize("task", list(TASKS))
def test_a_task_help_opens_with_its_own_options_and_examples_run_it(task, capsys):
    out = help_of(["train", task], capsys)
    groups = [line for line in out.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert groups[0] == f"{task} options:", groups
    assert len(out.splitlines()[0]) < 100          # one usage line, not fifty
    assert f"hyperscalees train {task}" in out.split("examples:")[-1]


def test_llm_help_lists_each_problem_sets_option_keys_and_offers_no_backprop(capsys):
    out = help_of(["train", "llm"], capsys)
    keys = out.split("--task-options keys (JSON) per --task:")[1].split("examples:")[0]
    for name in PROBLEM_SETS:
        assert f"  {name}: " in keys
    assert "max_numbers=" in keys
    assert "backprop" not in out
    assert "backprop" in help_of(["train", "lm"], capsys)     # lm has a loss: backprop stays offered
    code, _, err = invoke(["train", "llm", "--trainer", "backprop"], capsys)
    assert code == 2 and "invalid choice: 'backprop'" in err


def test_ntt_help_names_the_models_that_take_it(capsys):
    # it said "(transformer only)" while only float-gru takes ntt
    from hyperscalees.models.registry import LM_MODELS
    from hyperscalees.tasks.lm.task import lm_sizes

    def takes(model):
        try:
            lm_sizes(model, 32, 1, 16, 0, "wht")
            return True
        except ValueError:
            return False

    out = " ".join(help_of(["train", "lm"], capsys).split())
    ntt = out.split("--ntt {")[1].split("(default")[0]
    able = [m for m in LM_MODELS if takes(m)]
    assert able and f"({' / '.join(able)} only)" in ntt, ntt
