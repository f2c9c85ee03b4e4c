"""The admission checks as pure functions, against hand-computed figures: the cheat battery, the reading of a
verifier's reply, the two-pass comparison, answer leaks, near-duplicates, and each check's figures and verdict."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from task_pack_kit import write_pack

from swarmrl.configs.task_packs import AdmissionThresholdsConfig, PackLimitsConfig, VerifierBudgetConfig
from swarmrl.tasks.code_tests import CallCase, CodeTests, StdioCase
from swarmrl.tasks.packs import checks
from swarmrl.tasks.packs.cheats import (
    FORMAT_ONLY,
    borrowed_references,
    cheats_for,
    long_output,
    prompt_numbers,
    salted_constant,
    salted_noise,
)
from swarmrl.tasks.packs.checks import PolicyMeasurement, VerifierRun
from swarmrl.tasks.packs.judging import (
    Failure,
    Item,
    PassResult,
    disagreements,
    merged,
    reply_scores,
    score_of,
)
from swarmrl.tasks.packs.leaks import answer_in_prompt, shows
from swarmrl.tasks.packs.near_duplicates import NearDuplicateIndex, jaccard, shingles
from swarmrl.tasks.packs.pack import load_pack
from swarmrl.tasks.packs.report import CheckResult, Figure, verdict_of
from swarmrl.tasks.packs.rows import PackRow
from swarmrl.tasks.task import Task

THRESHOLDS = AdmissionThresholdsConfig()


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    return load_pack(write_pack(tmp_path_factory.mktemp("pack") / "p"), PackLimitsConfig())


def row(prompt: str, tests: CodeTests | None = None, **columns) -> PackRow:
    return PackRow("r", Task("r", prompt, "task_pack", columns), tests)


def test_the_battery_holds_the_generic_cheats():
    cheats = {c.name: c.completion for c in cheats_for(row("What is 17 + 2.5 - -3?"), "math", 0, 500)}
    assert cheats["empty"] == "" and cheats["prompt_echo"] == "What is 17 + 2.5 - -3?"
    assert cheats["prompt_numbers"] == "17 2.5 -3"
    assert cheats["prompt_numbers_boxed"] == "\\boxed{17} \\boxed{2.5} \\boxed{-3}"
    assert cheats["format_only"] == FORMAT_ONLY and cheats["constant_minus_1"] == "-1"
    assert len(cheats["long_output"]) == 500 and "\\boxed{24}" in cheats["long_output"]
    assert not any(name.startswith("code_") for name in cheats)
    assert salted_constant(1) != salted_constant(2) and cheats["constant_salted"] == str(salted_constant(0))


def test_salted_noise_and_other_rows_answers(pack):
    assert salted_noise("r0", 1) != salted_noise("r0", 2) and salted_noise("r0", 1) == salted_noise("r0", 1)
    assert len(salted_noise("r0", 1).split()) == 24
    borrowed = borrowed_references(pack, [0, 1, 2], "seed")
    assert set(borrowed) == {0, 1, 2}
    assert all(borrowed[row] != pack.references[pack.rows[row].row_id][0] for row in borrowed)
    same = dataclasses.replace(pack, references={"r0": ("42",)})  # only r0 can lend, and not to itself
    assert borrowed_references(same, [0, 1, 2], "seed") == {1: "42", 2: "42"}
    names = {c.name for c in cheats_for(pack.rows[0], "math", 0, 100, borrowed="123")}
    assert {"other_row_reference", "salted_noise"} <= names


def test_code_cheats_target_the_rows_functions():
    tests = CodeTests(calls=[CallCase("add", [1, 2], 3)], stdio=[StdioCase("1\n", "1\n")])
    cheats = {c.name: c.completion for c in cheats_for(row("Define add.", tests), "code", 0, 200)}
    assert "def add(*args, **kwargs):\n    return AlwaysEqual()" in cheats["code_always_equal"]
    assert cheats["code_exit_at_import"] == "```python\nimport os\nos._exit(0)\n```"
    assert {"code_echo_stdin", "code_system_exit", "code_forged_report", "code_prompt_numbers"} <= set(cheats)
    assert prompt_numbers("x1 = 3.25, y = -7") == ["1", "3.25", "-7"]


def test_the_long_output_lists_every_small_number_bare_and_boxed():
    text = long_output("What is 2 + 2?", ["2", "2"], 20000)
    assert len(text) == 20000 and text.startswith("What is 2 + 2?\n2 2\nyes no")
    assert all(f"\n{n} \\boxed{{{n}}}\n" in text for n in range(900))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (0, 0.0),
        (1, 1.0),
        (0.25, 0.25),
        (True, 1.0),
        (float("nan"), None),
        (1.5, Failure("returned 1.5, outside [0, 1]")),
        (-0.1, Failure("returned -0.1, outside [0, 1]")),
        (float("inf"), Failure("returned inf, outside [0, 1]")),
        ("1", Failure("returned str '1', not a number or None")),
        ([1.0], Failure("returned list '[1.0]', not a number or None")),
    ],
)
def test_each_score_is_read_by_type_and_range(value, expected):
    assert score_of(value) == expected


def test_a_reply_counts_only_as_one_score_per_completion():
    assert reply_scores(("returned", [1, None, 0.5]), 3) == [1.0, None, 0.5]
    assert reply_scores(("returned", (0, 0)), 2) == [0.0, 0.0]
    assert reply_scores(("returned", [1.0, 1.0]), 3) == [Failure("returned 2 scores for 3 completions")] * 3
    assert reply_scores(("returned", {"a": 1}), 1) == [Failure("returned a dict, not a list of 1 scores")]
    assert reply_scores(("raised", "KeyError", "'x'"), 2) == [Failure("raised KeyError: 'x'")] * 2


def test_two_passes_agree_or_the_item_fails():
    first = PassResult([1.0, 0.0, None, Failure("raised X: y"), 0.5])
    second = PassResult([1.0, 1.0, None, 0.0, Failure("the session ended first: timed out")])
    assert disagreements(first, second) == [1]
    assert merged(first, second) == [
        1.0,
        Failure("judged 0.0 then 1.0"),
        None,
        Failure("raised X: y"),
        Failure("the session ended first: timed out"),
    ]


def test_an_answer_leaks_only_as_a_whole_token():
    assert shows("what is 40 + 2? it is 42.", "42") and not shows("what is 420 + 1?", "42")
    assert shows("the answer: aelpp.", " AELPP ") and not shows("xaelppx", "aelpp")
    assert not shows("anything", "")
    assert answer_in_prompt(row("Which is larger, 17 or 25?", answer="25"), _manifest(["answer"]))
    assert answer_in_prompt(row("Name a prime: 2, 4, 6", answer=["7", "2"]), _manifest(["answer"]))
    assert not answer_in_prompt(row("Which is larger, 17 or 25?", answer="25"), _manifest([]))


def test_a_code_row_leaks_when_every_case_is_shown():
    shown = CodeTests(stdio=[StdioCase("1 2\n", "3\n"), StdioCase("5 5\n", "10\n")])
    prompt = "Add two numbers. Example: input 1 2 gives 3. Example: input 5 5 gives 10."
    assert answer_in_prompt(row(prompt, shown), _code_manifest())
    assert not answer_in_prompt(row("Add two numbers. Example: input 1 2 gives 3.", shown), _code_manifest())
    calls = CodeTests(calls=[CallCase("add", [4, 5], 9)])
    assert answer_in_prompt(row("add(4, 5) returns 9", calls), _code_manifest())
    assert not answer_in_prompt(row("add(4, 5) returns the sum", calls), _code_manifest())


def _manifest(answer_columns=(), task_type="math", kind="reward_function"):
    from swarmrl.tasks.packs.manifest import Manifest

    verifier = {"kind": kind}
    if kind == "reward_function":
        verifier.update(columns=["answer"], answer_columns=list(answer_columns))
    fields = {"format": 1, "name": "m", "version": "1.0.0", "author": "0" * 64, "license": "MIT"}
    return Manifest.model_validate({**fields, "task_type": task_type, "verifier": verifier})


def _code_manifest():
    return _manifest(task_type="code", kind="code_tests")


PROBLEM = (
    "A farmer has {n} cows and buys 12 more at the market on Tuesday. Each cow gives 8 litres of milk a day. "
    "How many litres of milk does the farmer collect in one week?"
)


def test_shingles_and_jaccard_by_hand():
    assert shingles("What is 2+2?") == {"what is 2", "is 2 +", "2 + 2", "+ 2 ?"}
    assert shingles("Hi there") == {"hi there"} and shingles("") == frozenset()
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)


def test_copies_and_light_rewordings_are_found_and_other_problems_are_not():
    index = NearDuplicateIndex(0.7)
    index.add("eval gsm", [PROBLEM.format(n=n) for n in (5, 17, 31)])
    found = index.matches(
        [
            PROBLEM.format(n=17),
            PROBLEM.format(n=31).replace("Tuesday", "Monday"),
            "Write a haiku about the sea and the wind in autumn, with the word salt in its second line.",
        ]
    )
    assert found[0].label == "eval gsm#1" and found[0].similarity == 1.0
    assert found[1].label == "eval gsm#2" and 0.7 <= found[1].similarity < 1.0
    assert found[2] is None


PROBLEMS = [
    "Tom has 3 apples and eats one of them before lunch. How many apples are left?",
    "A train travels 60 miles in 1.5 hours. What is its average speed in miles per hour?",
    "Sara reads 12 pages a day for 9 days. How many pages has she read in all?",
    "A rectangle is 7 cm wide and 11 cm long. What is its area in square centimetres?",
    "Bob saves 4 dollars each week. How many weeks until he has 52 dollars saved?",
    "A box holds 24 eggs and 5 break on the way home. How many eggs are still whole?",
    "Lena buys 3 pens at 2 dollars each and a notebook at 5 dollars. What does she pay?",
    "A tank fills at 15 litres a minute. How many minutes does it take to fill 300 litres?",
]


def test_a_shared_template_is_not_a_duplicate_but_a_copied_row_in_another_template_is():
    template = (
        "Please solve the following problem carefully, think step by step and box the answer. Problem: {q}"
    )
    index = NearDuplicateIndex(0.7)
    index.add("eval", [template.format(q=q) for q in PROBLEMS])
    fresh = [template.format(q=f"What is {a} plus {a + 3} minus {a // 2}?") for a in range(100, 110)]
    assert index.matches(fresh) == [None] * len(fresh)
    others = [
        f"Q: Name {count} animals that live in the {place}. Answer briefly."
        for count, place in zip(
            range(2, 10),
            ["sea", "desert", "forest", "city", "arctic", "jungle", "river", "mountains"],
            strict=True,
        )
    ]
    found = index.matches([f"Q: {PROBLEMS[1]} Answer briefly.", *others])
    assert found[0].label == "eval#1" and found[1:] == [None] * len(others)


def run_of(items: list[Item], outcomes: list) -> VerifierRun:
    return VerifierRun(items, outcomes, 0, 0.01, 4, 2)


def test_hackable_is_the_mean_score_of_each_cheat(pack):
    items = [
        Item(0, "", "empty"),
        Item(1, "", "empty"),
        Item(0, "1", "constant_1"),
        Item(1, "1", "constant_1"),
    ]
    result = checks.hackable(run_of(items, [0.0, Failure("raised"), 1.0, 0.0]), THRESHOLDS)
    assert result.status == "fail"
    assert [(f.name, f.value, f.ok) for f in result.figures] == [
        ("mean score of constant_1", 0.5, False),
        ("mean score of empty", 0.0, True),
    ]


def test_loads_takes_the_verifiers_figures(pack):
    static = checks.loads_static(pack, PackLimitsConfig())
    items = [Item(0, "42", "reference"), Item(1, "", "empty")]
    budget = VerifierBudgetConfig(max_call_seconds=5.0)
    slow = checks.with_verifier(static, pack, VerifierRun(items, [1.0, 0.0], 0, 6.5, 64, 2), budget)
    assert slow.status == "fail"
    assert [(f.name, f.ok) for f in slow.figures if not f.ok] == [("slowest call (s)", False)]
    differing = checks.with_verifier(
        static, pack, VerifierRun(items, [1.0, Failure("judged 0.0 then 1.0")], 1, 0.1, 2, 2), budget
    )
    assert {f.name: f.value for f in differing.figures if not f.ok} == {
        "share of completions scored, alike in every pass": 0.5,
        "completions judged differently": 1,
    }
    assert differing.details == {"failed": ["row r1 (empty): judged 0.0 then 1.0"]}


def test_solvable_counts_rows_a_reference_passes(pack):
    items = [
        Item(0, "42", "reference"),
        Item(1, "x", "reference"),
        Item(1, "123", "reference"),
        Item(2, "1", "reference"),
    ]
    result = checks.solvable_by_references(pack, run_of(items, [1.0, 0.0, 1.0, 0.99]), [0, 1, 2], THRESHOLDS)
    assert result.figures[0].value == pytest.approx(2 / 3) and result.status == "fail"
    assert result.details == {"unsolved": ["row r2"]}


def test_the_policy_seam_measures_pass_at_k_and_the_band():
    policy = PolicyMeasurement(k=2, samples={"a": (4, 1), "b": (4, 0), "c": (4, 4), "d": (4, 2)})
    solvable = checks.solvable_by_policy(policy, THRESHOLDS)
    # pass@2 per row: 1 - C(3,2)/C(4,2) = 0.5; 0; 1; 1 - C(2,2)/C(4,2) = 5/6
    assert solvable.figures[0].value == pytest.approx((0.5 + 0 + 1 + 5 / 6) / 4)
    useful = checks.useful(policy, (0.1, 0.8), THRESHOLDS)
    assert useful.figures[0].value == pytest.approx(2 / 4) and useful.status == "pass"  # 0.25 and 0.5 inside
    assert useful.figures[2].value == solvable.figures[0].value
    assert checks.useful(None, (0.1, 0.8), THRESHOLDS).status == "pending"
    assert checks.solvable_by_policy(None, THRESHOLDS).status == "pending"


def test_leaking_figures(pack):
    result = checks.leaking(pack, [True, False, False], [None, None, None], THRESHOLDS)
    assert result.figures[0].value == pytest.approx(1 / 3) and result.status == "fail"
    assert result.details == {"answer in prompt": ["row r0"]}


def test_the_verdict_is_the_first_failed_check_in_running_order():
    def check(name, status):
        return CheckResult(name=name, status=status, summary="")

    assert verdict_of([check("loads", "pass"), check("leaking", "fail"), check("hackable", "fail")]) == (
        "refused",
        "leaking",
    )
    every = [check(name, "pass") for name in ("loads", "leaking", "solvable", "hackable", "useful")]
    assert verdict_of(every) == ("admitted", None)
    assert verdict_of(every[:4] + [check("useful", "pending")]) == ("pending", None)
    assert Figure(name="x", value=0.3, limit=0.2, bound="max").ok is False
    assert Figure(name="x", value=math.inf).ok


def test_examples_folder_exists():
    assert (
        Path(__file__).resolve().parents[3] / "examples" / "task-packs" / "good" / "manifest.toml"
    ).is_file()
