"""Does a row give its answer away in its own prompt?

A reward-function row's answer is the value of each of its `answer_columns` (each item of a list). It leaks when
it appears in the prompt as a whole token sequence, case and spacing aside: "42" leaks from "... = 42?", not
from "... 420". A code_tests row leaks when every one of its test cases is shown in the prompt (a stdin case's
input and output, a call's arguments and result): a program printing what it was shown would pass them all.
A sample case in a problem statement is normal; all of them is the answer key.
"""

from __future__ import annotations

import json
import re
from typing import Any

from swarmrl.tasks.packs.manifest import Manifest, RewardFunctionVerifier
from swarmrl.tasks.packs.rows import PackRow

_SPACES = re.compile(r"\s+")


def normalised(text: str) -> str:
    return _SPACES.sub(" ", text).strip().lower()


def shows(prompt: str, text: str) -> bool:
    """Whether the normalised `text` stands in the (normalised) `prompt` as a whole, not inside a longer word."""
    needle = normalised(text)
    start = prompt.find(needle) if needle else -1
    while start >= 0:
        end = start + len(needle)
        glued_before = start > 0 and _is_word(prompt[start - 1]) and _is_word(needle[0])
        glued_after = end < len(prompt) and _is_word(prompt[end]) and _is_word(needle[-1])
        if not glued_before and not glued_after:
            return True
        start = prompt.find(needle, start + 1)
    return False


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def answer_in_prompt(row: PackRow, manifest: Manifest) -> bool:
    prompt = normalised(row.prompt_text)
    verifier = manifest.verifier
    if isinstance(verifier, RewardFunctionVerifier):
        answers = [
            text
            for column in verifier.answer_columns
            for text in _scalars(row.task.verification_info[column])
        ]
        return any(shows(prompt, answer) for answer in answers)
    tests = row.tests
    assert tests is not None
    stdio_shown = all(shows(prompt, case.input) and shows(prompt, case.output) for case in tests.stdio)
    calls_shown = all(
        shows(prompt, json.dumps(case.args)[1:-1])
        and any(shows(prompt, text) for text in _scalars(case.expected))
        for case in tests.calls
    )
    return stdio_shown and calls_shown


def _scalars(value: Any) -> list[str]:
    """The answer texts a column value stands for: a string or number, or each of a list of them."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, str | int | float):
        return [str(value)]
    if isinstance(value, list):
        return [text for item in value if not isinstance(item, list | dict) for text in _scalars(item)]
    return [json.dumps(value)]
