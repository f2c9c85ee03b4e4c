"""What junk task packs from free identities cost a validator (issue 61): the wall-clock time to refuse each.

`--packs` packs (default 100), each signed by a fresh key, cycle through the kinds of junk below, from the
cheapest to refuse to the dearest, at the default caps (1000 rows where a kind needs rows). Each is checked as a
validator checks it (`AdmissionContext(stop_early=True)`, default `[tasks.community.admission]`, held-out prompts
indexed), one after another. Printed per kind: packs, the check that refused them (every one must be refused),
median and largest seconds to refuse; then the total for all packs and the bound the config sets on any one
pack (the probe session, or two judging passes of at most `pass_seconds` each, run at once).

No anchor: no other framework admits tasks from strangers (prime-rl's hub is curated by hand; TRL and verl
take what the user passes).

    PYTHONPATH=src .venv/bin/python benchmarks/task_pack_junk_bench.py [--packs 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from swarmrl.configs.task_packs import AdmissionConfig
from swarmrl.identity import Identity
from swarmrl.tasks.packs.admission import AdmissionContext, check_pack_at
from swarmrl.tasks.packs.files import PackFiles
from swarmrl.tasks.packs.near_duplicates import NearDuplicateIndex
from swarmrl.tasks.packs.signing import signature_file

ROWS = 1000
EVALS = [
    f"A shop sells {n} apples on Monday and twice as many on Tuesday. How many apples in all?"
    for n in range(50)
]
HONEST = (
    "def reward(prompts, completions, answer, **kw):\n"
    "    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]\n"
    "    return [1.0 if t.strip() == a else 0.0 for t, a in zip(texts, answer)]\n"
)


def manifest(key: Identity) -> str:
    return (
        f'format = 1\nname = "junk"\nversion = "1.0.0"\nauthor = "{key.node_id}"\nlicense = "MIT"\n'
        'task_type = "math"\n[verifier]\nkind = "reward_function"\ncolumns = ["answer"]\nanswer_columns = ["answer"]\n'
    )


def rows(count: int = ROWS, prompt: Callable[[int], str] = lambda i: f"What is {i} * 7 + 3?") -> str:
    return "".join(
        json.dumps({"id": f"r{i}", "prompt": prompt(i), "answer": str(i * 7 + 3)}) + "\n"
        for i in range(count)
    )


def references(count: int = ROWS) -> str:
    return "".join(json.dumps({"id": f"r{i}", "completion": str(i * 7 + 3)}) + "\n" for i in range(count))


def signed_dir(folder: Path, key: Identity, files: dict[str, str], signer: Identity | None = None) -> Path:
    folder.mkdir(parents=True)
    data = {name: text.encode() for name, text in files.items()}
    data["signature.json"] = signature_file(PackFiles(str(folder), data), signer or key)
    for name, content in data.items():
        (folder / name).write_bytes(content)
    return folder


def pack(folder: Path, key: Identity, verifier: str = HONEST, **overrides: str) -> Path:
    files = {
        "manifest.toml": manifest(key),
        "prompts.jsonl": rows(),
        "references.jsonl": references(),
        "verifier.py": verifier,
    }
    files.update(overrides)
    return signed_dir(folder, key, files)


def raw_archive(folder: Path, members: list[tuple[str, int]]) -> Path:
    path = folder.with_suffix(".tar.gz")
    with gzip.open(path, "wb") as compressed:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            compressed.write(info.tobuf(format=tarfile.USTAR_FORMAT) + bytes(size + (-size % 512)))
    return path


def garbage(folder: Path, key: Identity) -> Path:
    path = folder.with_suffix(".tar.gz")
    path.write_bytes(os.urandom(1 << 20))
    return path


def traversal(folder: Path, key: Identity) -> Path:
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb") as compressed,
        tarfile.open(fileobj=compressed, mode="w") as tar,
    ):
        info = tarfile.TarInfo("../../etc/cron.d/x")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    path = folder.with_suffix(".tar.gz")
    path.write_bytes(buffer.getvalue())
    return path


def spin(seconds_before: str) -> str:
    return f"import time\nCALLS = [0]\ndef reward(prompts, completions, **kw):\n    CALLS[0] += 1\n{seconds_before}"


# name -> how to build it; in the order they are dealt to the keys.
KINDS: dict[str, Callable[[Path, Identity], Path]] = {
    "not a gzip archive": garbage,
    "decompression bomb": lambda f, k: raw_archive(f, [("prompts.jsonl", 64 << 20)]),
    "path traversal": traversal,
    "manifest not TOML": lambda f, k: pack(f, k, **{"manifest.toml": "format = [1"}),
    "signed by another key": lambda f, k: signed_dir(
        f,
        k,
        {"manifest.toml": manifest(k), "prompts.jsonl": rows(), "verifier.py": HONEST},
        Identity.generate(),
    ),
    "too many rows": lambda f, k: pack(f, k, **{"prompts.jsonl": rows(ROWS + 1), "references.jsonl": ""}),
    "a bad row at the end": lambda f, k: pack(f, k, **{"prompts.jsonl": rows() + "{not json\n"}),
    "verifier not python": lambda f, k: pack(f, k, verifier="def reward(:\n"),
    "answers in prompts": lambda f, k: pack(
        f, k, **{"prompts.jsonl": rows(prompt=lambda i: f"{i} * 7 + 3 = {i * 7 + 3}. What is {i} * 7 + 3?")}
    ),
    "copies of held-out evals": lambda f, k: pack(
        f, k, **{"prompts.jsonl": rows(prompt=lambda i: EVALS[i % 50])}
    ),
    "verifier fails at import": lambda f, k: pack(f, k, verifier="raise SystemExit(0)\n" + HONEST),
    "verifier raises": lambda f, k: pack(
        f, k, verifier="def reward(prompts, completions, **kw):\n    raise ValueError\n"
    ),
    "verifier miscounts": lambda f, k: pack(
        f, k, verifier="def reward(prompts, completions, **kw):\n    return [1.0]\n"
    ),
    "verifier spins at once": lambda f, k: pack(f, k, verifier=spin("    while True:\n        pass\n")),
    "verifier random": lambda f, k: pack(
        f,
        k,
        verifier="import random\ndef reward(prompts, completions, **kw):\n    return [random.random() for c in completions]\n",
    ),
    "verifier scores everything": lambda f, k: pack(
        f, k, verifier="def reward(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
    ),
    "verifier at the pace, for too long": lambda f, k: pack(
        f, k, verifier=spin("    time.sleep(0.019 * len(completions))\n    return [0.0] * len(completions)\n")
    ),
    "verifier sleeps after the probe": lambda f, k: pack(
        f,
        k,
        verifier=spin(
            "    if CALLS[0] > 1:\n        time.sleep(3600)\n    return [0.0] * len(completions)\n"
        ),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packs", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None, help="also write the per-pack figures here")
    args = parser.parse_args()
    config = AdmissionConfig()
    index = NearDuplicateIndex(config.thresholds.near_duplicate_jaccard)
    index.add("held-out evals", EVALS)
    context = AdmissionContext(config=config, held_out=index, stop_early=True)
    with tempfile.TemporaryDirectory() as scratch:
        results = run_all(Path(scratch), args.packs, context)
    report(results, config)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


def run_all(root: Path, count: int, context: AdmissionContext) -> list[dict]:
    kinds = list(KINDS)
    results = []
    for number in range(count):
        kind = kinds[number % len(kinds)]
        path = KINDS[kind](root / f"pack{number}", Identity.generate())
        started = time.monotonic()
        verdict = check_pack_at(path, context)
        seconds = time.monotonic() - started
        results.append(
            {"kind": kind, "seconds": seconds, "verdict": verdict.verdict, "refused_by": verdict.refused_by}
        )
        print(
            f"{number:3d} {kind:<34} {verdict.verdict:<8} {verdict.refused_by or '-':<9} {seconds:7.2f} s",
            flush=True,
        )
    return results


def report(results: list[dict], config: AdmissionConfig) -> None:
    print(f"\n{'kind':<34} {'packs':>5} {'refused by':<10} {'median s':>9} {'max s':>8}")
    for kind in KINDS:
        mine = [r for r in results if r["kind"] == kind]
        if not mine:
            continue
        refused = {r["refused_by"] or r["verdict"] for r in mine}
        times = [r["seconds"] for r in mine]
        print(
            f"{kind:<34} {len(mine):>5} {','.join(sorted(refused)):<10} {statistics.median(times):>9.2f} {max(times):>8.2f}"
        )
    total = sum(r["seconds"] for r in results)
    admitted = sum(r["verdict"] != "refused" for r in results)
    verifier = config.verifier
    print(
        f"\n{len(results)} packs from {len(results)} keys: {total:.1f} s in all, {total / len(results):.2f} s a pack, "
        f"{admitted} not refused; bound per pack: {verifier.startup_seconds + verifier.probe_items * verifier.ms_per_item / 1000:.2f} s "
        f"(probe) + {verifier.pass_seconds:.0f} s (two passes at once), under the {config.seconds:.0f} s admission budget"
    )


if __name__ == "__main__":
    main()
