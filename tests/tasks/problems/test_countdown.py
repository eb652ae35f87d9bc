"""Countdown: every verifier rule with its expected verdict, adversarial input in bounded time,
seeded problems (deterministic, solvable, validation and test splits disjoint from training), the reward."""
from __future__ import annotations

import pickle
import time
from fractions import Fraction

import pytest

from hyperscalees.tasks.countdown import ExpressionError, evaluate, parses, verify
from hyperscalees.tasks.problems import CountdownProblems
from hyperscalees.tasks.problems.countdown import MAX_CHARS, MAX_DEPTH

# (numbers, target, expression, verdict, what the case checks)
CASES = [
    ([3, 7, 25, 50], 100, "(7 - 3) * 25", True, "a valid subset: 50 unused"),
    ([3, 7, 25, 50], 100, "50 + 25 + 7 * 3 + 3 + 1", False, "1 is not given"),
    ([3, 7, 25, 50], 100, "50 * (7 - 3) / 2", False, "2 is not given"),
    ([2, 3], 12, "2 * 2 * 3", False, "reuse beyond multiplicity: 2 given once"),
    ([2, 2, 3], 12, "2 * 2 * 3", True, "a repeated number may be used as often as given"),
    ([2, 2, 3], 24, "2 * 2 * 2 * 3", False, "... but not more often"),
    ([3, 7, 25], 100, "(7 - 3) * 25 + 3", False, "wrong value (103)"),
    ([3, 7, 25], 103, "(7 - 3) * 25 + 3", False, "3 used twice"),
    ([3, 7, 25], 28, "25 + 3", True, "two of three numbers"),
    ([25], 25, "25", True, "a single number is an expression"),
    ([3, 7], 10, "3 + ", False, "malformed: dangling operator"),
    ([3, 7], 10, "(3 + 7", False, "malformed: unbalanced parenthesis"),
    ([3, 7], 10, "3 + 7)", False, "malformed: unbalanced parenthesis"),
    ([3, 7], 21, "3(7)", False, "malformed: implicit multiplication"),
    ([3, 7], 10, "3 7", False, "malformed: two numbers, no operator"),
    ([3, 7], 10, "()", False, "malformed: empty parentheses"),
    ([3, 7], 10, "", False, "malformed: empty"),
    ([3, 7], 10, "   ", False, "malformed: blank"),
    ([3, 7], 10, "3 + 7 = 10", False, "malformed: '=' is not allowed"),
    ([3, 7], 10, "x + 7", False, "malformed: a letter"),
    ([3, 7], 10, "3.0 + 7", False, "decimals are not integers as written"),
    ([3, 7], 10, "03 + 7", False, "leading zero"),
    ([3, 7], 10, "+3 + 7", False, "unary plus"),
    ([3, 7], 4, "-3 + 7", False, "unary minus at the start"),
    ([3, 7], -21, "3 * -7", False, "unary minus after an operator"),
    ([3, 7], 10, "3 - -7", False, "double minus"),
    ([3, 7], -4, "3 - 7", True, "a negative value is fine; only a sign is not"),
    ([3, 0], 3, "3 / 0", False, "division by zero"),
    ([3, 3, 0], 3, "3 / (3 - 3) + 3", False, "division by a zero subexpression"),
    ([0, 5], 0, "0 * 5", True, "a given 0 may be used"),
    ([8, 4, 2], 1, "8 / 4 / 2", True, "left to right: (8 / 4) / 2 = 1"),
    ([8, 4, 2], 4, "8 / 4 / 2", False, "... not 8 / (4 / 2) = 4"),
    ([8, 4, 2], 4, "8 / (4 / 2)", True, "parentheses override"),
    ([8, 4, 2], 2, "8 - 4 - 2", True, "left to right: (8 - 4) - 2"),
    ([2, 3, 4], 14, "2 + 3 * 4", True, "precedence: * before +"),
    ([2, 3, 4], 20, "2 + 3 * 4", False, "... not (2 + 3) * 4"),
    ([1, 2, 4], 6, "(1 + 1 / 2) * 4", False, "1 used twice"),
    ([1, 2, 4, 1], 6, "(1 + 1 / 2) * 4", True, "exact fractions in between"),
    ([1, 3, 3], 1, "1 / 3 * 3", True, "exact: 1/3 * 3 is 1 (floats give 0.999...)"),
    ([3, 7], 21, "3 × 7", True, "× reads as *"),
    ([3, 7], 4, "7 − 3", True, "− reads as -"),
    ([3, 6], 2, "6 ÷ 3", True, "÷ reads as /"),
    ([2, 9], 512, "2 ** 9", False, "no ** operator"),
    ([2, 999999], 0, "2**999999", False, "huge exponent"),
    ([9], 0, "9^9^9", False, "no ^ (and no tower)"),
    ([9, 9, 9], 729, "9^9^9", False, "no ^ even with the numbers given"),
    ([3, 7], 10, "3 + 7\n", False, "a newline is not a space"),
    ([3, 7], 10, " 3\t+ 7 ", True, "spaces and tabs are"),
]


@pytest.mark.parametrize("numbers, target, expression, verdict, why", CASES, ids=[c[4] for c in CASES])
def test_rule(numbers, target, expression, verdict, why):
    assert verify(numbers, target, expression) is verdict, why


def test_evaluate_gives_the_exact_value_and_the_reason():
    assert evaluate("(1 + 1 / 2) * 4", [1, 1, 2, 4]) == Fraction(6)
    assert evaluate("1 / 3", [1, 3]) == Fraction(1, 3)
    with pytest.raises(ExpressionError, match="division by zero"):
        evaluate("3 / 0", [3, 0])
    with pytest.raises(ExpressionError, match="unary minus"):
        evaluate("-3 + 7", [3, 7])
    with pytest.raises(ExpressionError, match="not among the given numbers"):
        evaluate("2 * 2", [2])
    for bad in ([1.5], [True], [-1], ["1"]):
        with pytest.raises(ValueError, match="numbers must be integers"):
            evaluate("1", bad)
    np = pytest.importorskip("numpy")
    assert verify(np.array([3, 7]), np.int64(10), "3 + 7")
    assert verify([3, 7], 10, None) is False and verify([3, 7], 10, b"3 + 7") is False


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


@pytest.mark.parametrize("expression", [
    "(" * 100_000 + "1" + ")" * 100_000,      # pathological nesting
    "1" + "+1" * 500_000,                      # a megabyte of valid-looking arithmetic
    "9" * 1_000_000,                           # a megabyte integer literal
    "2**" + "9" * 1_000_000,                   # a huge exponent
    "x" * 1_000_000,                           # a megabyte of junk
])
def test_adversarial_input_is_refused_fast(expression):
    verdict, seconds = timed(verify, [1, 2, 9], 1, expression)
    assert verdict is False and seconds < 0.01
    assert not parses(expression)


def test_nesting_and_length_caps_below_the_length_limit():
    ok = "(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    deep = "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    assert verify([1], 1, ok) and not verify([1], 1, deep)
    with pytest.raises(ExpressionError, match="nested deeper"):
        evaluate(deep, [1])
    unclosed = "(" * (MAX_CHARS - 1) + "1"  # at the length limit: no RecursionError, just refused
    assert len(unclosed) == MAX_CHARS and not verify([1], 1, unclosed)
    long_sum = " + ".join(["1"] * 50)
    assert len(long_sum) <= MAX_CHARS and verify([1] * 50, 50, long_sum)
    assert not verify([1] * 80, 80, " + ".join(["1"] * 80))  # 317 characters: over the limit


def test_parses_is_syntax_only():
    assert parses("123 + 456 / 0")  # numbers and value aside
    assert not parses("1 +") and not parses("-1") and not parses("2 ** 3")


# -- problems ----------------------------------------------------------------------------------
def test_generation_is_deterministic_and_seeded():
    a, b = CountdownProblems(seed=1), CountdownProblems(seed=1)
    assert a.problems("train", 0, 30) == b.problems("train", 0, 30)
    assert a.problems("test", 5, 10) == b.problems("test", 5, 10)
    assert a.problems("train", 0, 30) != CountdownProblems(seed=2).problems("train", 0, 30)
    assert a.problems("test", 0, 30) == CountdownProblems(seed=2).problems("test", 0, 30)  # held-out: seed-free
    assert a.problem("train", 7) == a.problems("train", 3, 10)[4]
    assert a.problem("train", 3) == a.problem("train", 3 + a.size("train"))  # indices wrap


def test_held_out_problems_never_appear_in_training():
    key = lambda p: (tuple(sorted(p.numbers)), p.answer)  # noqa: E731
    options = {"max_numbers": 3, "max_value": 12, "min_target": 10, "max_target": 60}  # a small problem space
    test = {key(p) for p in CountdownProblems(options=options).problems("test", 0, 60)}
    validation = {key(p) for p in CountdownProblems(options=options).problems("validation", 0, 60)}
    assert len(validation) > 40 and not validation & test
    for seed in range(3):
        train = {key(p) for p in CountdownProblems(seed=seed, options=options).problems("train", 0, 300)}
        assert len(train) > 200 and not train & test and not train & validation


@pytest.mark.parametrize("options", [{}, {"min_numbers": 2, "max_numbers": 2, "max_value": 10, "min_target": 1},
                                     {"min_numbers": 5, "max_numbers": 6, "use_all": False},
                                     {"min_numbers": 3, "max_numbers": 3, "max_value": 999, "max_target": 10_000}])
def test_every_problem_is_solvable_by_its_construction(options):
    task = CountdownProblems(seed=4, options=options)
    o = task.options
    for split in ("train", "test"):
        for p in task.problems(split, 0, 40):
            expression = p.solution.removeprefix("<answer>").removesuffix("</answer>")
            target = int(p.answer)
            assert verify(p.numbers, target, expression), p
            assert o.min_numbers <= len(p.numbers) <= o.max_numbers
            assert all(o.min_value <= x <= o.max_value for x in p.numbers)
            assert o.min_target <= target <= o.max_target and target not in p.numbers
            assert task.reward(p.prompt, p.solution) == 1.0
            assert str(target) in p.prompt and all(str(x) in p.prompt for x in p.numbers)


def test_use_all_builds_the_target_from_every_number():
    task = CountdownProblems(seed=0, options={"use_all": True})
    for p in task.problems("train", 0, 20):
        expression = p.solution[len("<answer>"):-len("</answer>")]
        used = sorted(int(t) for t in expression.replace("(", " ").replace(")", " ").split() if t.isdigit())
        assert used == sorted(p.numbers)


def test_options_are_checked():
    for bad, match in [({"min_numbers": 1}, "min_numbers"), ({"min_value": 50, "max_value": 10}, "min_value"),
                       ({"max_numbers": 40}, "character"), ({"template": "no field"}, "question"),
                       ({"template": "{question} {other}"}, "other than"), ({"nope": 1}, "unknown option")]:
        with pytest.raises(ValueError, match=match):
            CountdownProblems(options=bad)
    with pytest.raises(ValueError, match="out of reach"):
        CountdownProblems(options={"max_numbers": 2, "min_numbers": 2, "max_value": 3, "min_target": 500,
                               "max_target": 900}).problem("train", 0)
    with pytest.raises(ValueError, match="unknown split"):
        CountdownProblems().problem("dev", 0)


# -- the reward --------------------------------------------------------------------------------
def test_reward_for_format_and_correctness():
    task = CountdownProblems(seed=0, options={"max_numbers": 3, "min_numbers": 3})
    p = task.problem("train", 0)
    expression = p.solution[len("<answer>"):-len("</answer>")]
    wrong = " + ".join(map(str, p.numbers)) if sum(p.numbers) != int(p.answer) else " * ".join(map(str, p.numbers))
    assert task.reward(p.prompt, f"let me think... <answer>{expression}</answer>") == 1.0
    assert task.reward(p.prompt, f"<answer> {expression} </answer> trailing text") == 1.0
    assert task.reward(p.prompt, f"<answer>{wrong}</answer>") == 0.1          # well formed, wrong
    assert task.reward(p.prompt, "<answer>1000 + 1000</answer>") == 0.1     # well formed, numbers not given
    assert task.reward(p.prompt, "<answer>5 / 0</answer>") == 0.1           # well formed, division by zero
    assert task.reward(p.prompt, "<answer>-1</answer>") == 0.0              # not an expression
    assert task.reward(p.prompt, "<answer></answer>") == 0.0
    assert task.reward(p.prompt, expression) == 0.0                          # no tag
    assert task.reward(p.prompt, f"<answer>{expression}") == 0.0             # unclosed tag
    assert task.reward(p.prompt, f"<answer>{wrong}</answer> <answer>{expression}</answer>") == 1.0  # the last tag
    assert task.reward(p.prompt, "<answer>" + "(" * 10**6 + "</answer>") == 0.0
    score = task.score(p.prompt, f"<answer>{expression}</answer>")
    assert score.correct and score.formatted
    assert task.accuracy([p.prompt, p.prompt], [p.solution, "no"]) == 0.5


def test_reward_needs_a_prompt_the_task_handed_out():
    task = CountdownProblems()
    with pytest.raises(KeyError, match="not handed out"):
        task.reward("Using the numbers 1, 2, write ...", "<answer>1 + 2</answer>")


def test_a_pickled_task_scores_the_prompts_it_handed_out():
    task = CountdownProblems(seed=3)
    prompts = task.prompts("train", 0, 4)
    copy = pickle.loads(pickle.dumps(task.reward))  # a Ray worker's copy of RewardFitness's reward
    assert [copy(p, "<answer>1</answer>") for p in prompts] == [task.reward(p, "<answer>1</answer>") for p in prompts]


EASY = {"min_numbers": 3, "max_numbers": 3, "max_value": 9, "min_target": 10, "max_target": 50}  # ~430 test problems


def test_scores_read_distinct_held_out_problems_and_refuse_beyond_them():
    """A small problem space repeats problems across indices: the first 128 test indices of 3-number
    Countdown hold 113 distinct problems. Scoring reads the first N distinct ones, in index order."""
    task = CountdownProblems(options=EASY)
    raw = task.prompts("test", 0, 128)
    assert len(set(raw)) < 128                                       # repeats exist (the reason for this)
    distinct = [p.prompt for p in task.distinct_problems("test", 128)]
    assert len(set(distinct)) == 128
    assert distinct[:len(dict.fromkeys(raw))] == list(dict.fromkeys(raw))  # first appearances, in order
    held = task.distinct_size("test")
    assert 128 < held < task.size("test") and len(task.distinct_problems("test", held)) == held
    with pytest.raises(ValueError, match=f"the test split holds {held} distinct problems, fewer than the {held + 1}"):
        task.distinct_problems("test", held + 1)
    with pytest.raises(ValueError, match="whole number >= 1"):
        task.distinct_problems("test", 0)


def test_held_out_scores_each_distinct_problem_once(monkeypatch):
    from hyperscalees.tasks.problems import evaluate
    asked = []

    def fake_complete(model, tokenizer, prompts, sampling):
        asked.extend(prompts)
        return ["<answer>1</answer>"] * len(prompts), None, None
    monkeypatch.setattr(evaluate.llm, "complete", fake_complete)
    task = CountdownProblems(options=EASY)
    metrics = evaluate.held_out(task, None, None, count=128)
    assert len(asked) == len(set(asked)) == 128 and metrics["formatted"] == 1.0
