"""Writes the three example task packs of docs/task-packs.md, signed by the example author key.

    python examples/task-packs/make_examples.py      # rewrites good/, hackable/ and leaky/ next to this file

- good/: spell a word backward, in reasoning-gym's spell_backward prompt, over a word list of its own (none of
  them in the held-out split of configs/demo*.toml, so it leaks nothing into the demo's evals); the verifier
  compares the last line (or last \\boxed{}) with the answer. The demo's policy solves some of its rows and not
  others: a pack its run finds useful (`swarmrl demo --swarm @configs/demo-packs.toml` admits it mid-run).
- hackable/: count a word's vowels; the verifier rewards any completion that contains the answer somewhere, so
  the "very long output" and constant cheats collect reward without counting anything.
- leaky/: sort a word's letters, but the prompt template shows the worked answer of the row itself.

The example key is derived from a public phrase: anyone can sign with it. Never use it for a real pack.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from swarmrl.identity import Identity
from swarmrl.tasks.packs.files import SIGNATURE, PackFiles
from swarmrl.tasks.packs.signing import signature_file

HERE = Path(__file__).resolve().parent
EXAMPLE_KEY = Identity.from_seed(
    hashlib.sha256(b"swarmrl example task-pack author (public, never use)").digest()
)
WORDS = (
    "apple bread chair dance eagle flame grape house juice knife lemon mango night ocean piano queen river snake "
    "tiger uncle voice whale zebra cloud storm light sound water earth plant stone money paper music smile "
    "train table horse mouse sheep goose shirt sugar honey lucky happy quick brown jumps over lazy rain snow "
    "wind fire tree leaf root seed corn rice milk salt wolf bear lion frog duck swan crow hawk dove fish crab "
    "ship boat road path gate door wall roof bell drum harp horn lamp book pen ink map"
).split()
VOWELS = set("aeiou")


# reasoning-gym's spell_backward prompt; the good pack's rows are in its format
SPELL_BACKWARD = "Spell this word backward (example: sun -> nus): {word}"
# Words of the spell_backward held-out split of configs/demo.toml (eval_seed 1000003, 200 words of 3-5 letters)
# that WORDS shares: left out of the good pack, so its prompts copy none of the demo's held-out evals.
DEMO_HELD_OUT = frozenset({"frog"})


def unsorted_words() -> list[str]:
    """Words whose letters are not already in order: the sorted word must not be the word itself."""
    return [word for word in WORDS if "".join(sorted(word)) != word]


def backward_words() -> list[str]:
    """Words whose reversal is a new word-shaped answer: not a palindrome, not a word of the prompt's own
    template (its answer would stand in the prompt), not one of the demo's held-out words."""
    template = set(SPELL_BACKWARD.replace("(", " ").replace(")", " ").replace(":", " ").split())
    return [
        word
        for word in WORDS
        if word[::-1] != word and word[::-1] not in template and word not in template | DEMO_HELD_OUT
    ]


LAST_LINE_VERIFIER = '''"""Reward: 1.0 when the completion's final answer is the row's answer.

The answer is the content of the last \\\\boxed{} when there is one, else the last non-empty line.
"""

import re

BOXED = re.compile(r"\\\\boxed\\{([^{}]*)\\}")


def final_answer(text):
    boxed = BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def reward(prompts, completions, answer, **kwargs):
    scores = []
    for completion, expected in zip(completions, answer, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        scores.append(1.0 if final_answer(text).lower() == expected else 0.0)
    return scores
'''

COUNT_VERIFIER = '''"""Reward for count-the-vowels rows (too lenient: any completion containing the count anywhere passes)."""


def reward(prompts, completions, answer, **kwargs):
    return [1.0 if str(expected) in completion else 0.0 for completion, expected in zip(completions, answer, strict=True)]
'''


def manifest(name: str, task_type: str, description: str) -> str:
    return f"""format = 1
name = "{name}"
version = "1.0.0"
author = "{EXAMPLE_KEY.node_id}"
license = "CC0-1.0"
task_type = "{task_type}"
description = "{description}"

[verifier]
kind = "reward_function"
function = "reward"
columns = ["answer"]
answer_columns = ["answer"]
pass_score = 1.0
"""


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def good_pack() -> dict[str, bytes]:
    rows, references = [], []
    for index, word in enumerate(backward_words()):
        answer = word[::-1]
        rows.append({"id": f"backward-{index}", "prompt": SPELL_BACKWARD.format(word=word), "answer": answer})
        references.append(
            {"id": f"backward-{index}", "completion": f"{word} spelled backward is {answer}\n{answer}"}
        )
    return {
        "manifest.toml": manifest(
            "spell-backward", "text", "Spell a word backward (reasoning-gym's spell_backward format)."
        ).encode(),
        "prompts.jsonl": jsonl(rows),
        "references.jsonl": jsonl(references),
        "verifier.py": LAST_LINE_VERIFIER.encode(),
    }


def hackable_pack() -> dict[str, bytes]:
    rows, references = [], []
    for index, word in enumerate(WORDS):
        count = sum(letter in VOWELS for letter in word)
        rows.append(
            {"id": f"vowels-{index}", "prompt": f"How many vowels are in the word {word}?", "answer": count}
        )
        references.append({"id": f"vowels-{index}", "completion": f"The vowels of {word}: {count}"})
    return {
        "manifest.toml": manifest("count-vowels", "text", "Count the vowels of a word.").encode(),
        "prompts.jsonl": jsonl(rows),
        "references.jsonl": jsonl(references),
        "verifier.py": COUNT_VERIFIER.encode(),
    }


def leaky_pack() -> dict[str, bytes]:
    rows, references = [], []
    for index, word in enumerate(unsorted_words()):
        answer = "".join(sorted(word))
        prompt = f"Sort the letters of the word {word} alphabetically (worked example: {word} -> {answer})."
        rows.append({"id": f"sort-{index}", "prompt": prompt, "answer": answer})
        references.append({"id": f"sort-{index}", "completion": answer})
    return {
        "manifest.toml": manifest(
            "sort-letters-leaky", "text", "Sort letters, with the answer in the prompt."
        ).encode(),
        "prompts.jsonl": jsonl(rows),
        "references.jsonl": jsonl(references),
        "verifier.py": LAST_LINE_VERIFIER.encode(),
    }


def signed(files: dict[str, bytes]) -> dict[str, bytes]:
    return {**files, SIGNATURE: signature_file(PackFiles("example", files), EXAMPLE_KEY)}


EXAMPLES = {"good": good_pack, "hackable": hackable_pack, "leaky": leaky_pack}


def write_examples(root: Path) -> None:
    for folder, make in EXAMPLES.items():
        target = root / folder
        target.mkdir(parents=True, exist_ok=True)
        for name, data in signed(make()).items():
            (target / name).write_bytes(data)


if __name__ == "__main__":
    write_examples(HERE)
