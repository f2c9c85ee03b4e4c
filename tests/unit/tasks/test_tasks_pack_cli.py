"""`swarmrl tasks check | sign | pack`: the author's round trip and the exit codes (0 passes, 1 refused, 2 and
one line for a malformed pack)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from task_pack_kit import manifest_text, write_pack
from typer.testing import CliRunner

from swarmrl.cli import app
from swarmrl.identity import Identity

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "task-packs"


def run(*args: str):
    return CliRunner().invoke(app, ["tasks", *args])


def test_check_reports_and_exits_by_verdict():
    good = run("check", str(EXAMPLES / "good"))
    assert good.exit_code == 0, good.output
    assert "verdict: passes every check run here; pending: useful" in good.output
    leaky = run("check", str(EXAMPLES / "leaky"), "--json", "--stop-early")
    assert leaky.exit_code == 1, leaky.output
    report = json.loads(leaky.output)
    assert (report["verdict"], report["refused_by"]) == ("refused", "leaking")
    assert [check["name"] for check in report["checks"]] == ["loads", "leaking"]


def test_a_malformed_pack_is_one_line_and_exit_2(tmp_path):
    folder = write_pack(tmp_path / "p")
    (folder / "prompts.jsonl").write_text('{"id": "a", "prompt": "q", "answer": "1"}\n')
    result = run("check", str(folder))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {folder}/signature.json: the files changed since they were signed (sign the pack again)"
    ]


def test_an_author_signs_archives_and_checks_a_pack(tmp_path):
    key = Identity.from_seed(b"\x05" * 32)
    key.save(tmp_path / "author.pem")
    folder = write_pack(tmp_path / "mine", manifest=manifest_text(key.node_id), sign=False)
    signed = run("sign", str(folder), "--key", str(tmp_path / "author.pem"))
    assert signed.exit_code == 0, signed.output
    assert signed.output.startswith("signed test-pack@0.1.0: 3 rows, id ")
    archive = tmp_path / "mine.tar.gz"
    packed = run("pack", str(folder), "--out", str(archive))
    assert packed.exit_code == 0, packed.output
    assert packed.output.split("id ")[1] == signed.output.split("id ")[1]
    checked = run("check", str(archive))
    assert checked.exit_code == 0, checked.output


def test_sign_names_the_key_a_manifest_must_carry(tmp_path):
    key = Identity.from_seed(b"\x06" * 32)
    key.save(tmp_path / "author.pem")
    folder = write_pack(tmp_path / "mine", sign=False)
    result = run("sign", str(folder), "--key", str(tmp_path / "author.pem"))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f'error: {folder}/manifest.toml: author is not this key; set author = "{key.node_id}"'
    )


@pytest.mark.slow  # building the demo's reasoning-gym held-out split takes seconds
def test_check_compares_with_the_held_out_evals_of_a_run_config():
    result = run("check", str(EXAMPLES / "good"), "--config", str(ROOT / "configs" / "demo.toml"), "--json")
    assert result.exit_code == 0, result.output
    leaking = next(check for check in json.loads(result.output)["checks"] if check["name"] == "leaking")
    assert leaking["summary"].endswith("0 rows near-duplicate one of 200 held-out or admitted prompts")
