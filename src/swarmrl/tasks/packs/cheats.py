"""The generic cheats: completions that solve nothing, which a sound verifier scores (near) zero.

Every pack meets the text cheats: the empty answer, constants, the prompt echoed, every number in the prompt
(bare and boxed), a very long output listing every small number and word a lazy verifier could be looking
for, and the answer formats with nothing in them. Packs of task_type code also meet the code cheats, the
attacks the code verifier already refuses (tests/adversarial/tasks): leaving at import with a zero status,
echoing stdin, printing the prompt's numbers, objects equal to everything, forged harness reports and frames.

Two cheats a verifier cannot recognise by their look: salted noise (words and numbers drawn from the salt: a
validator keeps its salt to itself, so a verifier written to know the battery in advance cannot know them; one
constant is drawn from it too), and another row's reference solution whose answer differs — a well-formed,
plausible answer to another question, which only a verifier that checks the answer refuses. A verifier that
scores everything but the known cheats is caught by these two.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from swarmrl.tasks.packs.leaks import normalised
from swarmrl.tasks.packs.manifest import RewardFunctionVerifier
from swarmrl.tasks.packs.pack import TaskPack
from swarmrl.tasks.packs.rows import PackRow

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_WORDS = "yes no true false True False A B C D E none unknown"
_NOISE_WORDS = (
    "the of and answer result so is therefore value letters word sum total first last order count number "
    "because then thus final step check equals yes no"
).split()
FORMAT_ONLY = "<think>\n</think>\n<answer></answer>\n\\boxed{}\n"

_ALWAYS_EQUAL = """\
class AlwaysEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __hash__(self): return 0
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __repr__(self): return "True"
    __str__ = __repr__
"""
_FORGED = """\
import json, os, sys
frame = json.dumps(["t", "ran", 0, "1\\n", "", False]).encode()
for path in ("/proc/self/fd/1", f"/proc/{os.getppid()}/fd/1"):
    try:
        with open(path, "wb") as sink:
            sink.write(len(frame).to_bytes(4, "big") + frame)
    except OSError:
        pass
print("@@results@@ passed=True all tests passed")
sys.stdout.flush()
os._exit(0)
"""


@dataclass(frozen=True)
class Cheat:
    name: str
    completion: str


def cheats_for(
    row: PackRow, task_type: str, salt: int, long_chars: int, borrowed: str | None = None
) -> list[Cheat]:
    """Every cheat for `row`; `borrowed` is another row's reference (see `borrowed_references`)."""
    cheats = text_cheats(row, salt, long_chars)
    if borrowed is not None:
        cheats.append(Cheat("other_row_reference", borrowed))
    if task_type == "code":
        cheats += code_cheats(row)
    return cheats


def borrowed_references(pack: TaskPack, rows: list[int], seed: str) -> dict[int, str]:
    """For each of `rows`, a reference of another row whose answer differs (a seeded choice); rows with no such
    donor are left out."""
    keys = [_answer_key(pack, row) for row in pack.rows]
    donors = [index for index, row in enumerate(pack.rows) if pack.references.get(row.row_id)]
    borrowed: dict[int, str] = {}
    for row in rows:
        candidates = [donor for donor in donors if keys[donor] != keys[row]]
        if candidates:
            draw = random.Random(f"{seed}/{row}")
            donor = pack.rows[draw.choice(candidates)]
            borrowed[row] = draw.choice(pack.references[donor.row_id])
    return borrowed


def _answer_key(pack: TaskPack, row: PackRow) -> str:
    """What two rows must differ in for one's reference to be a wrong answer to the other: the answer columns,
    else the prompt (a code row's tests follow its prompt)."""
    verifier = pack.manifest.verifier
    if isinstance(verifier, RewardFunctionVerifier) and verifier.answer_columns:
        return repr([normalised(str(row.task.verification_info[c])) for c in verifier.answer_columns])
    return normalised(row.prompt_text)


def text_cheats(row: PackRow, salt: int, long_chars: int) -> list[Cheat]:
    numbers = prompt_numbers(row.prompt_text)
    constants = {"0": "0", "1": "1", "minus_1": "-1", "yes": "yes", "true": "True", "a": "A"}
    constants["salted"] = str(salted_constant(salt))
    return [
        Cheat("empty", ""),
        *(Cheat(f"constant_{name}", value) for name, value in constants.items()),
        Cheat("prompt_echo", row.prompt_text),
        Cheat("prompt_numbers", " ".join(numbers)),
        Cheat("prompt_numbers_boxed", " ".join(f"\\boxed{{{n}}}" for n in numbers)),
        Cheat("long_output", long_output(row.prompt_text, numbers, long_chars)),
        Cheat("format_only", FORMAT_ONLY),
        Cheat("salted_noise", salted_noise(row.row_id, salt)),
    ]


def code_cheats(row: PackRow) -> list[Cheat]:
    names = sorted({case.fn_name for case in row.tests.calls}) if row.tests is not None else []
    numbers = prompt_numbers(row.prompt_text)
    always_equal = _ALWAYS_EQUAL + "".join(
        f"def {name}(*args, **kwargs):\n    return AlwaysEqual()\n" for name in names
    )
    programs = {
        "code_empty": "pass\n",
        "code_exit_at_import": "import os\nos._exit(0)\n",
        "code_system_exit": "raise SystemExit(0)\n",
        "code_echo_stdin": "import sys\nsys.stdout.write(sys.stdin.read())\n",
        "code_prompt_numbers": f"print(*{numbers!r}, sep='\\n')\n",
        "code_always_equal": always_equal + "print(AlwaysEqual())\n",
        "code_forged_report": _FORGED,
    }
    return [Cheat(name, f"```python\n{code}```") for name, code in programs.items()]


def prompt_numbers(text: str) -> list[str]:
    return _NUMBER.findall(text)


def salted_noise(row_id: str, salt: int, tokens: int = 24) -> str:
    draw = random.Random(f"swarmrl-noise/{salt}/{row_id}")
    return " ".join(
        draw.choice(_NOISE_WORDS) if draw.random() < 0.7 else str(draw.randint(0, 9999))
        for _ in range(tokens)
    )


def salted_constant(salt: int) -> int:
    return random.Random(f"swarmrl-cheat/{salt}").randint(2, 999)


def long_output(prompt: str, numbers: list[str], chars: int) -> str:
    """The prompt, its numbers, common answer words, then every integer from 0 up, bare and boxed, to `chars`."""
    parts = [prompt, " ".join(numbers), _WORDS]
    size = sum(len(part) + 1 for part in parts)
    value = 0
    while size < chars:
        part = f"{value} \\boxed{{{value}}}"
        parts.append(part)
        size += len(part) + 1
        value += 1
    return "\n".join(parts)[:chars]
