"""Small signed task packs for the tests: a manifest, rows, references and a verifier, written and signed.

`write_pack(folder, verifier=...)` makes a three-row pack ("what is a + b?", answer column) whose files the
test then varies; every pack is signed by a fixed test key unless `key` says otherwise.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.identity import Identity
from swarmrl.tasks.packs.files import SIGNATURE, PackFiles, read_pack_files
from swarmrl.tasks.packs.signing import signature_file

TEST_KEY = Identity.from_seed(hashlib.sha256(b"swarmrl task pack tests").digest())

EXACT_VERIFIER = """
def text(completion):
    return completion if isinstance(completion, str) else completion[-1]["content"]

def reward(prompts, completions, answer, **kwargs):
    return [1.0 if text(c).strip().splitlines()[-1:] == [str(a)] else 0.0 for c, a in zip(completions, answer)]
"""
ROWS = [
    {"id": "r0", "prompt": "What is 17 + 25?", "answer": "42"},
    {"id": "r1", "prompt": "What is 120 + 3?", "answer": "123"},
    {"id": "r2", "prompt": [{"role": "user", "content": "What is 9 + 9?"}], "answer": "18"},
]
REFERENCES = [
    {"id": "r0", "completion": "42"},
    {"id": "r1", "completion": "123"},
    {"id": "r2", "completion": "18"},
]


def manifest_text(author: str = TEST_KEY.node_id, **verifier: object) -> str:
    settings = {
        "kind": "reward_function",
        "function": "reward",
        "columns": ["answer"],
        "answer_columns": ["answer"],
    }
    settings.update(verifier)
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    return (
        f'format = 1\nname = "test-pack"\nversion = "0.1.0"\nauthor = "{author}"\nlicense = "MIT"\n'
        f'task_type = "math"\n\n[verifier]\n' + "\n".join(lines) + "\n"
    )


def jsonl(rows: list) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def write_pack(
    folder: Path,
    verifier: str | None = EXACT_VERIFIER,
    rows: list | None = None,
    references: list | None = None,
    manifest: str | None = None,
    key: Identity = TEST_KEY,
    sign: bool = True,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "manifest.toml": manifest if manifest is not None else manifest_text(key.node_id),
        "prompts.jsonl": jsonl(ROWS if rows is None else rows),
    }
    if verifier is not None:
        files["verifier.py"] = verifier
    if references is None or references:
        files["references.jsonl"] = jsonl(REFERENCES if references is None else references)
    for name, text in files.items():
        (folder / name).write_text(text)
    if sign:
        resign(folder, key)
    return folder


def resign(folder: Path, key: Identity = TEST_KEY) -> None:
    (folder / SIGNATURE).unlink(missing_ok=True)
    files = read_pack_files(folder, PackLimitsConfig())
    (folder / SIGNATURE).write_bytes(signature_file(PackFiles(files.origin, files.files), key))
