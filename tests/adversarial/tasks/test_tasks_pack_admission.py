"""Task packs from strangers, admitted or refused for the right check, with their verifiers in the sandbox.

The three example packs are classified as docs/task-packs.md says; a hostile verifier (slow, crashing,
lying about its count or range, non-deterministic, order-dependent, escaping) is refused by `loads` with the
reason, and nothing of it reaches this process; code_tests packs meet the code cheats the code verifier refuses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from task_pack_kit import EXACT_VERIFIER, manifest_text, write_pack

from swarmrl.configs.task_packs import AdmissionConfig, VerifierBudgetConfig
from swarmrl.tasks.packs.admission import AdmissionContext, check_pack, check_pack_at
from swarmrl.tasks.packs.held_out import held_out_index
from swarmrl.tasks.packs.pack import load_pack

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "task-packs"
# Short sessions for verifiers meant to hang: a hang costs about a second, not the default three.
HOSTILE = AdmissionContext(
    config=AdmissionConfig(
        verifier=VerifierBudgetConfig(startup_seconds=1.0, batch_items=8, max_call_seconds=0.5)
    )
)
TEXT = "def text(c):\n    return c if isinstance(c, str) else c[-1]['content']\n"


@pytest.fixture(scope="module")
def examples():
    return {
        name: check_pack_at(EXAMPLES / name, AdmissionContext()) for name in ("good", "hackable", "leaky")
    }


def test_the_good_example_passes_every_local_check(examples):
    report = examples["good"]
    assert report.verdict == "pending" and report.refused_by is None
    assert {c.name: c.status for c in report.checks} == {
        "loads": "pass",
        "leaking": "pass",
        "solvable": "pass",
        "hackable": "pass",
        "useful": "pending",
    }


def test_the_hackable_example_is_refused_by_its_cheats(examples):
    report = examples["hackable"]
    assert (report.verdict, report.refused_by) == ("refused", "hackable")
    failed = {f.name for f in report.check("hackable").figures if not f.ok}
    assert {"mean score of long_output", "mean score of constant_1"} <= failed
    assert report.check("leaking").status == report.check("solvable").status == "pass"


def test_the_leaky_example_is_refused_for_its_answers_in_prompts(examples):
    report = examples["leaky"]
    assert (report.verdict, report.refused_by) == ("refused", "leaking")
    assert report.check("leaking").figures[0].value == 1.0
    assert report.check("hackable").status == "pass"


def test_prompts_of_held_out_evals_or_admitted_packs_are_refused(tmp_path):
    good = load_pack(EXAMPLES / "good", AdmissionConfig().limits)
    copied = [{"prompt": row.prompt_text} for row in good.rows[:5]]
    (tmp_path / "evals.jsonl").write_text("".join(json.dumps(row) + "\n" for row in copied))
    index = held_out_index(0.7, eval_files=[tmp_path / "evals.jsonl"])
    report = check_pack(good, AdmissionContext(held_out=index, stop_early=True))
    assert (report.verdict, report.refused_by) == ("refused", "leaking")
    assert [c.name for c in report.checks] == ["loads", "leaking"]  # stopped before any sandbox ran
    assert report.check("leaking").figures[1].value == pytest.approx(5 / len(good.rows))
    again = check_pack(good, AdmissionContext(held_out=held_out_index(0.7, admitted=[good]), stop_early=True))
    assert again.refused_by == "leaking" and again.check("leaking").figures[1].value == 1.0


HOSTILE_VERIFIERS = {
    "hangs": ("def reward(prompts, completions, **kw):\n    while True:\n        pass\n", "fell behind"),
    "hangs_after_the_probe": (
        "import time\nCALLS = [0]\ndef reward(prompts, completions, **kw):\n    CALLS[0] += 1\n"
        "    if CALLS[0] > 2:\n        time.sleep(60)\n    return [0.0] * len(completions)\n",
        "fell behind 20 ms per completion",
    ),
    "fails_at_import": (
        "raise ValueError('boom')\ndef reward(prompts, completions, **kw):\n    return []\n",
        "boom",
    ),
    "raises": ("def reward(prompts, completions, **kw):\n    raise KeyError('nope')\n", "raised KeyError"),
    "one_score_too_many": (
        "def reward(prompts, completions, **kw):\n    return [1.0] * (len(completions) + 1)\n",
        "scores for",
    ),
    "out_of_range": (
        "def reward(prompts, completions, **kw):\n    return [7.0] * len(completions)\n",
        "outside [0, 1]",
    ),
    "strings": (
        "def reward(prompts, completions, **kw):\n    return ['1'] * len(completions)\n",
        "not a number",
    ),
    "random": (
        TEXT + "import random\ndef reward(prompts, completions, answer, **kw):\n"
        "    return [float(text(c) == a) if random.random() < 0.8 else 0.5 for c, a in zip(completions, answer)]\n",
        "judged",
    ),
    "remembers_calls": (
        TEXT + "SEEN = [0]\ndef reward(prompts, completions, answer, **kw):\n    out = []\n"
        "    for c, a in zip(completions, answer):\n        SEEN[0] += 1\n"
        "        out.append(1.0 if text(c) == a or SEEN[0] % 5 == 0 else 0.0)\n    return out\n",
        "judged",
    ),
    "hash_seed": (  # str hashes are salted per process: each session draws its own
        "def reward(prompts, completions, **kw):\n    return [hash('swarm') % 1000 / 1000 for c in completions]\n",
        "judged",
    ),
    "slow_calls": (  # each call longer than the pace allows a batch: the probe falls behind at its first
        "import time\ndef reward(prompts, completions, **kw):\n    time.sleep(1.5)\n    return [0.0] * len(completions)\n",
        "fell behind",
    ),
    "memory_hog": (
        "def reward(prompts, completions, **kw):\n    x = bytearray(3 << 30)\n    return [0.0]\n",
        "MemoryError",
    ),
    "huge_reply": ("def reward(prompts, completions, **kw):\n    return ['x' * (40 << 20)]\n", "ended"),
    "exits": ("import os\ndef reward(prompts, completions, **kw):\n    os._exit(0)\n", "ended"),
    "network": (
        "import socket\ndef reward(prompts, completions, **kw):\n"
        "    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return [1.0] * len(completions)\n",
        "not allowed",
    ),
    "reads_host_files": (
        "def reward(prompts, completions, **kw):\n    open('/etc/passwd').read()\n    return [1.0] * len(completions)\n",
        "No such file",
    ),
    "forks": (
        "import os\ndef reward(prompts, completions, **kw):\n    os.fork()\n    return [0.0]\n",
        "fork",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_VERIFIERS))
def test_a_hostile_verifier_is_refused_by_loads_with_the_reason(tmp_path, name):
    source, reason = HOSTILE_VERIFIERS[name]
    started = time.monotonic()
    report = check_pack_at(write_pack(tmp_path / name, verifier=source), HOSTILE)
    assert time.monotonic() - started < 20
    assert (report.verdict, report.refused_by) == ("refused", "loads")
    loads = report.check("loads")
    assert any(not figure.ok for figure in loads.figures)
    assert reason in " ".join(loads.details.get("failed", [])), loads.details
    assert {c.name: c.status for c in report.checks}["hackable"] == "skipped"


def test_the_honest_verifier_of_the_kit_passes(tmp_path):
    report = check_pack_at(write_pack(tmp_path / "p", verifier=EXACT_VERIFIER), HOSTILE)
    assert report.verdict == "pending", report


def test_a_verifier_that_scores_everything_passes_loads_and_is_refused_as_hackable(tmp_path):
    lenient = "def reward(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
    report = check_pack_at(write_pack(tmp_path / "p", verifier=lenient), HOSTILE)
    assert (report.refused_by, report.check("loads").status) == ("hackable", "pass")


# Written knowing the static battery: it refuses each of those cheats by its look and rewards anything else.
KNOWS_THE_BATTERY = (
    TEXT
    + """import re
KNOWN = {"", "0", "1", "-1", "yes", "True", "A"}
def reward(prompts, completions, **kw):
    scores = []
    for prompt, completion in zip(prompts, completions):
        question, answer = text(prompt if isinstance(prompt, str) else [prompt[-1]]), text(completion).strip()
        numbers = re.findall(r"-?\\d+(?:\\.\\d+)?", question)
        known = {question, " ".join(numbers), " ".join("\\\\boxed{%s}" % n for n in numbers)}
        cheat = answer in KNOWN | known or len(answer) > 5000 or "<think>" in answer
        scores.append(0.0 if cheat else 1.0)
    return scores
"""
)


def test_a_verifier_that_knows_the_battery_is_caught_by_the_salt_and_other_rows_answers(tmp_path):
    report = check_pack_at(write_pack(tmp_path / "p", verifier=KNOWS_THE_BATTERY), HOSTILE)
    assert (report.refused_by, report.check("loads").status) == ("hackable", "pass")
    failed = {f.name.removeprefix("mean score of ") for f in report.check("hackable").figures if not f.ok}
    assert failed == {"constant_salted", "salted_noise", "other_row_reference"}


def test_a_pack_over_its_time_budget_is_refused(tmp_path):
    context = AdmissionContext(config=AdmissionConfig(seconds=0.001))
    report = check_pack_at(write_pack(tmp_path / "p"), context)
    assert report.refused_by == "loads"
    assert "over the admission time budget" in " ".join(report.check("loads").details["failed"])


def code_manifest() -> str:
    text = manifest_text().replace('task_type = "math"', 'task_type = "code"')
    return text[: text.index("[verifier]")] + '[verifier]\nkind = "code_tests"\n'


def stdin_row(row_id: str, prompt: str, cases: list[tuple[str, str]]) -> dict:
    tests = [{"type": "stdin_stdout", "input": given, "output": wanted} for given, wanted in cases]
    return {"id": row_id, "prompt": prompt, "verification_info": {"test_cases": tests}}


CODE_ROWS = [
    stdin_row("add", "Read two integers and print their sum.", [("1 2\n", "3\n"), ("20 22\n", "42\n")]),
    {
        "id": "mul",
        "prompt": "Define mul(a, b) returning the product.",
        "verification_info": json.dumps({"test_cases": [{"fn_name": "mul", "input": [6, 7], "output": 42}]}),
    },
]
CODE_REFERENCES = [
    {"id": "add", "completion": "```python\na, b = map(int, input().split())\nprint(a + b)\n```"},
    {"id": "mul", "completion": "```python\ndef mul(a, b):\n    return a * b\n```"},
]


def test_code_packs_are_judged_by_the_trusted_judge_and_meet_the_code_cheats(tmp_path):
    folder = write_pack(
        tmp_path / "code", verifier=None, rows=CODE_ROWS, references=CODE_REFERENCES, manifest=code_manifest()
    )
    report = check_pack_at(folder, AdmissionContext())
    assert report.verdict == "pending", report
    names = {figure.name for figure in report.check("hackable").figures}
    assert {
        "mean score of code_exit_at_import",
        "mean score of code_always_equal",
        "mean score of code_forged_report",
    } <= names
    # Tests that only ask to echo the input are beaten by a program that echoes stdin.
    echo = [
        stdin_row("echo", "Print the line you are given.", [("hello\n", "hello\n"), ("swarm\n", "swarm\n")])
    ]
    references = [{"id": "echo", "completion": "```python\nprint(input())\n```"}]
    folder = write_pack(
        tmp_path / "echo", verifier=None, rows=echo, references=references, manifest=code_manifest()
    )
    report = check_pack_at(folder, AdmissionContext())
    assert report.refused_by == "hackable"
    assert [f.name for f in report.check("hackable").figures if not f.ok] == ["mean score of code_echo_stdin"]


def test_a_code_pack_that_shows_its_tests_or_fails_its_references_is_refused(tmp_path):
    shown = [
        stdin_row(
            "add",
            "Sum two integers: '1 2' gives 3 and '20 22' gives 42.",
            [("1 2\n", "3\n"), ("20 22\n", "42\n")],
        )
    ]
    folder = write_pack(
        tmp_path / "shown", verifier=None, rows=shown, references=[], manifest=code_manifest()
    )
    assert check_pack_at(folder, AdmissionContext(stop_early=True)).refused_by == "leaking"
    wrong = [{"id": "add", "completion": "```python\nprint(0)\n```"}]
    folder = write_pack(
        tmp_path / "wrong", verifier=None, rows=CODE_ROWS[:1], references=wrong, manifest=code_manifest()
    )
    report = check_pack_at(folder, AdmissionContext())
    assert report.refused_by == "solvable" and report.check("solvable").details == {"unsolved": ["row add"]}
