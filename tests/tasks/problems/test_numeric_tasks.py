"""Arithmetic word problems and GSM8K-style JSONL: answer extraction, exact matching, rewards,
seeded and held-out problems, the file format and its errors, the registry."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from hyperscalees.tasks.problems import PROBLEM_SETS, ArithmeticProblems, DataError, Gsm8kProblems, Problem, get_problem_set
from hyperscalees.tasks.problems.numeric import check_numeric, extract_answer, last_number, to_fraction


@pytest.mark.parametrize("text, number", [
    ("so the answer is 42.", "42"), ("first 3 then 5", "5"), ("-7 degrees", "-7"), ("5-3", "3"),
    ("It costs $1,234 in total", "1,234"), ("1,2", "2"), ("pi is 3.14", "3.14"), ("x1 and 12", "12"),
    ("no digits", None), ("7/2", "2"), ("total: 18.", "18"),
])
def test_last_number(text, number):
    assert last_number(text) == number


@pytest.mark.parametrize("completion, value, formatted", [
    ("48 / 2 = 24. <answer>24</answer>", Fraction(24), True),
    ("<answer>$1,200</answer>", Fraction(1200), True),
    ("<answer>x = 3.50</answer>", Fraction(7, 2), True),
    ("<answer>-3</answer>", Fraction(-3), True),
    ("<answer>twelve</answer> but 12 really", Fraction(12), False),   # no number in the tag: fall back
    ("the answer is 12", Fraction(12), False),                        # no tag: the last number
    ("<answer>5</answer> then <answer>6</answer>", Fraction(6), True),  # the last tag
    ("<answer>6", Fraction(6), False),                                # unclosed: not well formed
    ("nothing here", None, False),
    ("<answer>" + "9" * 100 + "</answer>", None, False),             # too long to be an answer
])
def test_extract_answer(completion, value, formatted):
    assert extract_answer(completion) == (value, formatted)


def test_exact_comparison_and_reward():
    p = Problem(prompt="q", answer="3.5", solution="<answer>3.5</answer>")
    assert check_numeric(p, "<answer>3.50</answer>").reward == 1.0
    assert check_numeric(p, "<answer>3.49</answer>").reward == 0.1
    assert check_numeric(p, "about 3.5").reward == 1.0       # correct without the format still counts
    assert check_numeric(p, "about 4").reward == 0.0
    assert check_numeric(p, None).reward == 0.0
    assert to_fraction("1,234.5") == Fraction(2469, 2) and to_fraction("1e5") is None and to_fraction("") is None


# -- arithmetic ----------------------------------------------------------------------------------
def test_arithmetic_problems_are_seeded_correct_and_bounded():
    task = ArithmeticProblems(seed=5)
    train = task.problems("train", 0, 150)
    assert train == ArithmeticProblems(seed=5).problems("train", 0, 150)
    assert train != ArithmeticProblems(seed=6).problems("train", 0, 150)
    test = task.problems("test", 0, 50)
    assert test == ArithmeticProblems(seed=6).problems("test", 0, 50)
    for p in train + test:
        assert 1 <= int(p.answer) <= 999
        assert task.reward(p.prompt, p.solution) == 1.0
        assert 2 + 1 <= p.prompt.count(".") and "<answer></answer>" in p.prompt
        # the worked solution is a chain of true equations
        for line in p.solution.split("<answer>")[0].strip().split(". "):
            left, right = line.rstrip(".").split(" = ")
            a, op, b = left.split()
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b), "/": int(a) / int(b)}[op] \
                == int(right)
    steps = [p.prompt.split("?")[0].count(".") for p in train]  # the start sentence + 2..4 steps
    assert min(steps) == 3 and max(steps) == 5


def test_arithmetic_held_out_is_disjoint_from_training():
    def story(p):  # the numbers and operations, names and objects aside
        return tuple(w for w in p.prompt.split() if w[0].isdigit() or w in ("buys", "gives", "doubles", "triples",
                                                                             "splits", "bags"))
    small = {"min_steps": 2, "max_steps": 2, "max_number": 5}  # few distinct stories: overlaps would show
    test = {story(p) for p in ArithmeticProblems(options=small).problems("test", 0, 200)}
    validation = {story(p) for p in ArithmeticProblems(options=small).problems("validation", 0, 200)}
    assert len(test) > 50 and len(validation) > 50 and not test & validation
    for seed in range(2):
        train = {story(p) for p in ArithmeticProblems(seed=seed, options=small).problems("train", 0, 1000)}
        assert len(train) > 300 and not train & test and not train & validation
    # validation, like test, is the same for every seed
    assert ArithmeticProblems(seed=3).problems("validation", 0, 5) == ArithmeticProblems(seed=4).problems("validation", 0, 5)


def test_arithmetic_options():
    easy = ArithmeticProblems(options={"min_steps": 1, "max_steps": 1, "max_number": 5})
    for p in easy.problems("train", 0, 30):
        assert p.prompt.split("?")[0].count(".") == 2
    with pytest.raises(ValueError, match="min_steps"):
        ArithmeticProblems(options={"min_steps": 3, "max_steps": 2})
    with pytest.raises(ValueError, match="max_number"):
        ArithmeticProblems(options={"max_number": 1})


def test_template_wraps_the_prompt_and_the_reward_still_finds_it():
    chat = "<|user|>\n{question}<|end|>\n<|assistant|>\n"
    task = ArithmeticProblems(options={"template": chat})
    p = task.problem("train", 0)
    assert p.prompt.startswith("<|user|>\n") and p.prompt.endswith("<|assistant|>\n")
    assert task.reward(p.prompt, p.solution) == 1.0


# -- gsm8k -----------------------------------------------------------------------------------------
def test_gsm8k_shipped_sample():
    task = Gsm8kProblems()
    assert (task.size("train"), task.size("test")) == (12, 6)
    train, test = task.problems("train", 0, 12), task.problems("test", 0, 6)
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    for p in train + test:
        assert task.reward(p.prompt, p.solution) == 1.0 and "<<" not in p.solution
        assert p.prompt.endswith("Give the final answer as a number inside <answer></answer>.\n")
    assert [p.answer for p in test] == ["152", "9", "46", "17", "12", "-3"]  # file order
    assert sorted(p.prompt for p in train) == sorted(p.prompt for p in Gsm8kProblems(seed=1).problems("train", 0, 12))
    assert [p.prompt for p in train] != [p.prompt for p in Gsm8kProblems(seed=1).problems("train", 0, 12)]
    p = test[0]
    assert task.reward(p.prompt, "6 * 35 = 210, 210 - 58 = 152. <answer>152</answer>") == 1.0
    assert task.reward(p.prompt, "<answer>150</answer>") == 0.1
    assert task.reward(p.prompt, "I think 152") == 1.0
    assert task.reward(p.prompt, "I think 150") == 0.0


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_gsm8k_file_format(tmp_path):
    train = write(tmp_path / "train.jsonl", [
        {"question": "A?", "answer": "1 + 1 = <<1+1=2>>2\n#### 2"},
        {"question": "B?", "answer": "#### 1,250"},
        {"question": "C?", "answer": 7},
        {"question": "D?", "answer": 2.5, "extra": "ignored"},
        {"question": "E?", "answer": "-4"},
        "",
    ])
    task = Gsm8kProblems(options={"train": train, "test": train})
    answers = {p.prompt.split("\n")[0]: p.answer for p in task.problems("test", 0, 5)}
    assert answers == {"A?": "2", "B?": "1250", "C?": "7", "D?": "2.5", "E?": "-4"}
    a = task.problem("test", 0)
    assert a.solution == "1 + 1 = 2 <answer>2</answer>"
    d = task.problem("test", 3)
    assert task.reward(d.prompt, "<answer>2.50</answer>") == 1.0 and task.reward(d.prompt, "<answer>2</answer>") == 0.1


@pytest.mark.parametrize("rows, match", [
    (["not json"], r"bad.jsonl:1: not JSON"),
    ([{"question": "A?"}], r"bad.jsonl:1: need an object with 'question' and 'answer'"),
    ([{"question": "", "answer": "1"}], "non-empty string"),
    ([{"question": "A?", "answer": "#### many"}], r"after '####' is not a number: 'many'"),
    ([{"question": "A?", "answer": "four"}], r"no '####' in it"),
    ([{"question": "A?", "answer": [1]}], "string or a number"),
    ([{"question": "A?", "answer": "1"}, {"question": "A?", "answer": "2"}], r"bad.jsonl:2: repeats the question of line 1"),
    ([], "no problems"),
])
def test_gsm8k_bad_files_name_the_file_and_line(tmp_path, rows, match):
    bad = write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=match):
        Gsm8kProblems(options={"train": bad})


def test_gsm8k_validation_split_is_an_optional_file(tmp_path):
    rows = write(tmp_path / "val.jsonl", [{"question": "V?", "answer": "#### 3"}])
    assert Gsm8kProblems(options={"validation": rows}).problem("validation", 0).answer == "3"
    with pytest.raises(ValueError, match="gsm8k has no validation split: give its JSONL file as the task option"):
        Gsm8kProblems().problem("validation", 0)


def test_gsm8k_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such JSONL file.*nope.jsonl"):
        Gsm8kProblems(options={"test": str(tmp_path / "nope.jsonl")})


# -- the registry ------------------------------------------------------------------------------------
def test_registry():
    assert sorted(PROBLEM_SETS) == ["arithmetic", "countdown", "gsm8k"]
    for name, cls in PROBLEM_SETS.items():
        task = get_problem_set(name)(seed=0)
        assert cls.name == name and task.size("train") >= 1 and task.size("test") >= 1
        p = task.problem("test", 0)
        assert task.reward(p.prompt, p.solution) == 1.0 and task.reward(p.prompt, "") == 0.0
    with pytest.raises(ValueError, match=r"unknown problem set 'chess'; choose one of \['arithmetic'"):
        get_problem_set("chess")
