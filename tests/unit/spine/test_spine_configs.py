"""The shipped run configs resolve (`--dry-run`), and the demo keeps its plain prompt while the chat example
prompts through a ChatML template with <think> reasoning."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmrl.cli import app

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def dry_run(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["demo.toml", "demo-swarm.toml", "demo-chat-think.toml"])
def test_run_configs_resolve(name):
    resolved = dry_run("rl", f"@{CONFIGS / name}")
    assert resolved["run"]["name"] == name.removesuffix(".toml")


def test_chat_think_example_prompts_through_the_template():
    resolved = dry_run("demo", f"@{CONFIGS / 'demo-chat-think.toml'}")
    assert resolved["model"]["chat_template"] == "chatml"
    assert resolved["prompt"]["format"] == "chat"
    assert resolved["prompt"]["enable_thinking"] is True
    assert resolved["tasks"]["extraction"] == {**resolved["tasks"]["extraction"], "mode": "think"}
    assert resolved["tasks"]["sources"][0]["demonstration_template"].startswith("<think>")


def test_demo_keeps_its_plain_prompt():
    # The demo's tokenizer is trained without a chat template, so "auto" resolves to the plain template.
    resolved = dry_run("demo", f"@{CONFIGS / 'demo.toml'}")
    assert resolved["model"]["chat_template"] == "none"
    assert resolved["prompt"]["format"] == "auto"
    assert resolved["prompt"]["template"] == "{question}\nAnswer:"
    assert resolved["prompt"]["add_bos"] is True


def test_a_bad_prompt_setting_is_a_config_error():
    result = CliRunner().invoke(app, ["rl", f"@{CONFIGS / 'demo.toml'}", "prompt.format='xml'", "--dry-run"])
    assert result.exit_code == 2
    assert (
        result.output
        == "error: config error: prompt.format: Input should be 'auto', 'chat' or 'plain' (got 'xml')\n"
    )
