"""Cheats aimed at what issue 58 added: objects of the solution's classes held in the sandbox, exceptions
that keep their type, printed output relayed, `from solution import *`, arguments changed in place, and the
sandbox's own call server. Every one must score 0 while the honest solution of the same task scores 1."""

import pytest

from swarmrl.configs.tasks import CodeRewardConfig, TasksConfig
from swarmrl.tasks.reward import RewardRequest, reward_computer
from swarmrl.tasks.task import Task

STACK_TESTS = (
    "import pytest\nfrom solution import Stack, top_of\n\n"
    "def test_push_pop():\n    s = Stack()\n    s.push(3)\n    s.push(4)\n    assert s.pop() == 4\n"
    "    assert s.size() == 1\n\n"
    "def test_empty():\n    s = Stack()\n    assert s.is_empty()\n    with pytest.raises(IndexError):\n"
    "        s.pop()\n\n"
    "def test_top_of():\n    assert top_of([1, 2]) == 2\n"
)
HONEST = (
    "class Stack:\n    def __init__(self):\n        self.items = []\n"
    "    def push(self, x):\n        self.items.append(x)\n"
    "    def pop(self):\n        return self.items.pop()\n"
    "    def size(self):\n        return len(self.items)\n"
    "    def is_empty(self):\n        return not self.items\n"
    "def top_of(xs):\n    return xs[-1]\n"
)
ALWAYS = (
    "class Always:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
    "        return False\n    __hash__ = object.__hash__\n    def __bool__(self):\n        return True\n"
    "    def __len__(self):\n        return 1\n"
)
CHEATS = {
    "method returns an object equal to everything": ALWAYS
    + HONEST.replace("return self.items.pop()", "return Always()").replace(
        "return len(self.items)", "return Always()"
    ),
    "truthy object for a yes/no method": ALWAYS + HONEST.replace("return not self.items", "return Always()"),
    "function returns an object equal to everything": ALWAYS
    + HONEST.replace("return xs[-1]", "return Always()"),
    "pop raises a fake pytest outcome": HONEST.replace(
        "return self.items.pop()",
        "class Skipped(BaseException):\n            pass\n        raise Skipped('skip')",
    ),
    "pop raises unittest's SkipTest": HONEST.replace(
        "return self.items.pop()", "import unittest\n        raise unittest.SkipTest('later')"
    ),
    "exit inside a method": HONEST.replace("return self.items.pop()", "exit(0)"),
    "prints a pytest summary": "print('3 passed in 0.01s')\n" + HONEST.replace("return xs[-1]", "return 0"),
    "forges the call server's replies": (
        "import sys\n"
        "for module in list(sys.modules.values()):\n"
        "    calls = getattr(module, 'Calls', None)\n"
        "    if calls is not None:\n"
        "        calls.invoke = lambda self, *a: ('value', True, '', [])\n"
        "        calls.answer = lambda self, request: ('value', True, '', [])\n" + HONEST
    ),
    "lists fake names and classes": (
        "import sys\n"
        "for module in list(sys.modules.values()):\n"
        "    calls = getattr(module, 'Calls', None)\n"
        "    if calls is not None:\n"
        "        calls.names = lambda self: {'Stack': ['class', ['push', 'pop'], ['IndexError']],"
        " 'top_of': ['value']}\n" + HONEST.replace("return xs[-1]", "return 0")
    ),
    "infinite generator": HONEST.replace("return xs[-1]", "while True:\n        yield 2"),
}
STAR_TESTS = "from solution import *\n\ndef test_order():\n    assert sorted(order([3, 1, 2])) == [1, 2, 3]\n"
STAR_CHEAT = "def sorted(xs):\n    return [1, 2, 3]\ndef order(xs):\n    return []\n"
MUTATION_TESTS = "from solution import dedupe\n\ndef test_dedupe():\n    xs = [1, 1, 2]\n    dedupe(xs)\n    assert xs == [1, 2]\n"


def task(name: str, test: str) -> Task:
    return Task(name, "p", "code", {"test": test})


def request(task_: Task, code: str) -> RewardRequest:
    return RewardRequest(task_, f"<think>x</think>\n```python\n{code}\n```", 10)


@pytest.fixture(scope="module")
def rewards():
    computer = reward_computer(TasksConfig(code=CodeRewardConfig(num_workers=2, timeout_seconds=20)))
    stack = task("stack", STACK_TESTS)
    named = [
        ("honest", request(stack, HONEST)),
        *((name, request(stack, code)) for name, code in CHEATS.items()),
        ("star import shadows sorted", request(task("star", STAR_TESTS), STAR_CHEAT)),
        ("star import honest", request(task("star", STAR_TESTS), "def order(xs):\n    return xs\n")),
        (
            "dedupe returns without changing",
            request(task("mut", MUTATION_TESTS), "def dedupe(xs):\n    return [1, 2]\n"),
        ),
        (
            "dedupe in place",
            request(task("mut", MUTATION_TESTS), "def dedupe(xs):\n    xs[:] = list(dict.fromkeys(xs))\n"),
        ),
    ]
    breakdowns = computer.compute_batch([r for _, r in named])
    return {name: b.task_reward for (name, _), b in zip(named, breakdowns, strict=True)}


def test_the_honest_solutions_score_one(rewards):
    assert [rewards["honest"], rewards["star import honest"], rewards["dedupe in place"]] == [1.0, 1.0, 1.0]


def test_every_cheat_scores_zero(rewards):
    cheats = [*CHEATS, "star import shadows sorted", "dedupe returns without changing"]
    assert {name: rewards[name] for name in cheats} == dict.fromkeys(cheats, 0.0)
