"""The run config's sections are the roles' own typed models; [validator] and [shardcast] parse from TOML and
reach the nodes; reading a config loads no torch (the role boundaries are checked statically in
test_spine_boundaries.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmrl.configs import ConfigError, RunConfig, load_config
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.configs.envs import FeedbackEnvConfig
from swarmrl.configs.islands import IslandsConfig
from swarmrl.configs.loss import LossConfig
from swarmrl.configs.shardcast import ClientConfig, ShardcastConfig
from swarmrl.configs.tasks import TasksConfig
from swarmrl.configs.validator import ValidatorConfig

SRC = Path(__file__).resolve().parents[3] / "src"

SECTIONS = """
[validator]
logprob_tolerance = 5e-4
reward_bounds = [0.0, 1.0]
prefill_batch_size = 4

[validator.toploc]
min_exponent_match_fraction = 0.8

[shardcast]
origin_host = "10.0.0.5"
origin_port = 8800
advertise_url = "http://trainer.example:8800/"
shard_size = 8192
delta = false

[shardcast.client]
concurrency = 3
keep_versions = 2
"""


def test_every_role_section_is_its_roles_model():
    config = RunConfig.model_validate({"env": {"kind": "feedback", "max_tokens": 8}})
    expected = {
        "tasks": TasksConfig,
        "loss": LossConfig,
        "coordinator": CoordinatorConfig,
        "islands": IslandsConfig,
        "validator": ValidatorConfig,
        "shardcast": ShardcastConfig,
        "env": FeedbackEnvConfig,
    }
    for name, model in expected.items():
        assert isinstance(getattr(config, name), model), name
        assert RunConfig.model_fields[name].annotation is not object


def test_validator_and_shardcast_sections_parse_from_toml(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(SECTIONS)
    config = load_config(path)
    assert config.validator.logprob_tolerance == 5e-4
    assert config.validator.reward_bounds == (0.0, 1.0)
    assert config.validator.prefill_batch_size == 4
    assert config.validator.toploc.min_exponent_match_fraction == 0.8
    shardcast = config.shardcast
    assert (shardcast.origin_host, shardcast.origin_port) == ("10.0.0.5", 8800)
    assert shardcast.advertise_url == "http://trainer.example:8800"  # the trailing slash is dropped
    assert shardcast.client == ClientConfig(concurrency=3, keep_versions=2)
    origin = shardcast.origin_config()
    assert (origin.host, origin.port, origin.shard_size, origin.delta) == ("10.0.0.5", 8800, 8192, False)
    # A node is handed the resolved config.json: the sections survive it unchanged.
    resolved = tmp_path / "config.json"
    resolved.write_text(config.dump_json())
    assert load_config(resolved) == config


def test_defaults_keep_one_machine_on_loopback():
    config = RunConfig()
    assert config.shardcast.origin_host == "127.0.0.1" and config.shardcast.advertise_url is None
    assert config.validator == ValidatorConfig() and config.shardcast.client == ClientConfig()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("shardcast.originhost='0.0.0.0'", "shardcast.originhost"),
        ("shardcast.advertise_url='trainer:8800'", "advertise URL 'trainer:8800'"),
        ("shardcast.advertise_url='http://trainer:8800/path'", "http://HOST"),
        ("shardcast.origin_port=70000", "shardcast.origin_port"),
        ("shardcast.client.concurency=2", "shardcast.client.concurency"),
        ("validator.logprob_tolerance=0", "validator.logprob_tolerance"),
        ("validator.toploc.made_up=1", "validator.toploc.made_up"),
    ],
)
def test_a_bad_value_is_refused_by_its_name(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, [override])


def _probe(code: str) -> dict:
    """Run `code` in a fresh interpreter; it prints a JSON value as its last line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


HEAVY = ("torch", "transformers", "aiohttp", "sqlalchemy", "fastapi")


def test_reading_a_config_loads_no_role_code_and_no_torch():
    loaded = _probe(
        "import json, sys\n"
        "from swarmrl.configs import RunConfig, load_config\n"
        "config = load_config(None, ['env.kind=\"feedback\"', 'env.max_tokens=8', 'shardcast.origin_host=\"0.0.0.0\"'])\n"
        "RunConfig.model_validate_json(config.dump_json())\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    assert loaded == []


def test_a_worker_starts_fetching_its_policy_before_it_imports_torch():
    # `swarmrl worker` starts the feed, then imports the node: the first download overlaps torch's import.
    loaded = _probe(
        "import json, sys\nimport swarmrl.worker.cli\nfrom swarmrl.worker.feed import start_policy_feed\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'})))\n"
    )
    assert loaded == []


@pytest.mark.slow
def test_the_probe_sees_torch_where_it_is_imported():
    # The same probe on a module that needs torch: proves the check above can fail. (The sampler imports torch
    # and nothing else heavy: the probe's process takes ~2.4 s of CPU instead of the ~6.5 s that a module
    # bringing transformers along costs.)
    loaded = _probe(
        "import json, sys\nimport swarmrl.inference.sampler\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch'})))\n"
    )
    assert loaded == ["torch"]


def test_the_nodes_fetch_with_the_shardcast_section(tmp_path):
    from swarmrl.validator.node import FetchedPolicies, ValidatorOptions
    from swarmrl.worker.feed import NodeOptions, policy_fetcher

    config = load_config(None, ["shardcast.client.concurrency=3", "shardcast.client.keep_versions=2"])
    relays = ["http://relay.example:8900"]
    cpu = torch.device("cpu")
    node = NodeOptions("http://c", "R", tmp_path / "k.pem", relays, tmp_path / "w")
    assert policy_fetcher(config, node, "ab" * 32).config == config.shardcast.client
    options = ValidatorOptions("http://c", "R", tmp_path / "v.pem", relays, tmp_path / "v")
    policies = FetchedPolicies(options, "ab" * 32, "float32", 4, config.shardcast.client, cpu)
    # The validator keeps on disk at least the versions it holds loaded, whatever the section says.
    assert policies.fetching == config.shardcast.client.model_copy(update={"keep_versions": 5})
    roomy = config.shardcast.client.model_copy(update={"keep_versions": 9})
    assert FetchedPolicies(options, "ab" * 32, "float32", 4, roomy, cpu).fetching == roomy
    # A LoRA run's base is pinned on top of the section's own pins, for workers and validators alike.
    lora = load_config(None, ["trainer.lora.enabled=true", "shardcast.client.pinned_versions=[3]"])
    assert policy_fetcher(lora, node, "ab" * 32).config.pinned_versions == [0, 3]
    lora_policies = FetchedPolicies(options, "ab" * 32, "float32", 4, lora.shardcast.client, cpu, lora=True)
    assert lora_policies.fetching.pinned_versions == [0, 3]


def test_a_wildcard_bind_is_served_under_this_machines_name():
    import socket

    from swarmrl.shardcast.server import served_url

    assert served_url("0.0.0.0", 8800) == f"http://{socket.gethostname()}:8800"
    assert served_url("10.0.0.5", 8800) == "http://10.0.0.5:8800"
    assert served_url("::1", 8900) == "http://[::1]:8900"
