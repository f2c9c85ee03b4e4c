"""A worker never prunes a policy it is loading or using (issue 57: a slow-starting worker's own prefetch deleted
the version it was still loading, and it crashed with `no *.safetensors weights`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast.client import ShardcastClient, local_versions
from swarmrl.shardcast.layout import manifest_path
from swarmrl.steps import step_dir_name
from swarmrl.worker import node as worker_node
from swarmrl.worker.feed import NodeOptions

TRAINER_KEY = "ab" * 32


def install(root: Path, version: int) -> Path:
    """A version as an install leaves it: its weights and, last, its manifest."""
    directory = root / step_dir_name(version)
    manifest_path(directory).parent.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"weights")
    manifest_path(directory).write_text("{}")
    return directory


@pytest.fixture
def client(tmp_path: Path) -> ShardcastClient:
    return ShardcastClient(
        ["http://127.0.0.1:9"], TRAINER_KEY, tmp_path / "checkpoints", ClientConfig(keep_versions=1)
    )


def test_pruning_keeps_held_versions_and_deletes_the_rest(client: ShardcastClient):
    for version in (1, 2, 3, 4):
        install(client.dest_root, version)
    client.holds.hold(2)
    client._collect_old_versions(keep=4)
    assert local_versions(client.dest_root) == [2, 4]
    client.holds.release(2)
    client._collect_old_versions(keep=4)
    assert local_versions(client.dest_root) == [4]
    assert sorted(p.name for p in client.dest_root.iterdir()) == ["step_4"]  # nothing half-deleted left


def _policy(client: ShardcastClient, tmp_path: Path, monkeypatch, build) -> worker_node.Policy:
    monkeypatch.setattr(worker_node, "fetch_base", lambda *args: None)
    monkeypatch.setattr(worker_node, "worker_tokenizer", lambda *args: None)
    monkeypatch.setattr(worker_node, "prompt_format", lambda *args: SimpleNamespace(stop_token_ids=[0]))
    fetcher = SimpleNamespace(
        dest_root=client.dest_root, holds=client.holds, config=client.config, fetch=None, refresh=None
    )
    feed = SimpleNamespace(
        run=SimpleNamespace(async_level=2), fetcher=fetcher, prefetch=SimpleNamespace(fetching=None)
    )
    options = NodeOptions("http://127.0.0.1:9", "r", tmp_path / "node.key", [], tmp_path)
    config = SimpleNamespace(model=SimpleNamespace(dtype="float32"), engine=None, prompt=None)
    policy = worker_node.Policy(options, feed, config, device=None)
    monkeypatch.setattr(policy, "_build", build)
    return policy


class FakeEngine:
    def __init__(self, step: int) -> None:
        self.policy_step = step

    def load_weights(self, path: Path, policy_step: int) -> None:
        assert (path / "model.safetensors").is_file(), f"{path.name} pruned while it was loaded"
        self.policy_step = policy_step


def test_the_prefetch_never_prunes_the_version_a_worker_is_loading_or_using(
    client: ShardcastClient, tmp_path: Path, monkeypatch
):
    install(client.dest_root, 9)

    def slow_build(engine_config, path: Path, step: int) -> FakeEngine:
        # While the first version loads, the prefetch installs three newer ones and prunes past keep_versions=1.
        for newer in (10, 11, 12):
            install(client.dest_root, newer)
            client._collect_old_versions(keep=newer)
        assert (path / "model.safetensors").is_file(), "the version being loaded was pruned"
        return FakeEngine(step)

    policy = _policy(client, tmp_path, monkeypatch, slow_build)
    policy.load_first(policy.options.stop)
    assert policy.step == 9
    assert local_versions(client.dest_root) == [9, 12]  # in use: kept; 10 and 11 pruned
    policy.refresh(12)
    assert policy.step == 12
    client._collect_old_versions(keep=12)
    assert local_versions(client.dest_root) == [12]  # 9 replaced: no longer held
    assert client.holds.held() == {12}


def test_a_version_pruned_before_its_hold_is_picked_again(
    client: ShardcastClient, tmp_path: Path, monkeypatch
):
    install(client.dest_root, 3)
    policy = _policy(client, tmp_path, monkeypatch, lambda config, path, step: FakeEngine(step))
    real_hold = client.holds.hold

    def pruned_first(version: int) -> None:  # the prefetch wins the race between the listing and the hold
        install(client.dest_root, 4)
        client.holds.prune(client.dest_root, [3])
        real_hold(version)

    monkeypatch.setattr(client.holds, "hold", pruned_first)
    policy.refresh(3)
    assert policy.engine is None and client.holds.held() == set()
    monkeypatch.setattr(client.holds, "hold", real_hold)
    policy.refresh(4)
    assert policy.step == 4
