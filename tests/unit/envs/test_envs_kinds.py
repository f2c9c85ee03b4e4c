"""`build_env` builds every kind of environment an `[env]` section may name (a kind added to the union and
missed by its `match` ends in its `assert_never` here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_unions import member_id, sample_of, union_members

from swarmrl.configs.envs import EnvConfig, FeedbackEnvConfig, PluginEnvConfig, PythonToolEnvConfig
from swarmrl.envs.base import Environment
from swarmrl.envs.build import build_env
from swarmrl.envs.feedback import FeedbackEnv
from swarmrl.envs.plugin import load_plugin
from swarmrl.envs.python_tool import PythonToolEnv

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "byo"


def example_plugin() -> PluginEnvConfig:
    entry = "byo_example.guess:GuessTheNumber"
    return PluginEnvConfig(kind="plugin", entry=entry, source_hash=load_plugin(entry).source_hash)


SAMPLES = {
    PythonToolEnvConfig: (lambda: PythonToolEnvConfig(kind="python_tool"), PythonToolEnv),
    FeedbackEnvConfig: (lambda: FeedbackEnvConfig(kind="feedback"), FeedbackEnv),
    PluginEnvConfig: (example_plugin, None),
}


@pytest.mark.parametrize("kind", union_members(EnvConfig), ids=member_id)
def test_every_environment_kind_builds(kind, math_verifier, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    config, environment = sample_of(SAMPLES, kind)
    env = build_env(config(), math_verifier)
    assert isinstance(env, Environment)
    assert type(env).__name__ == (environment.__name__ if environment else "GuessTheNumber")
