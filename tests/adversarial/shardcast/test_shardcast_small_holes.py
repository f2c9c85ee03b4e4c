"""Small holes (issue 20, item 8): the fetch CLI checks the run id; bytes that failed their check are not kept
in `.partial/`. (`Range: bytes=-0` is in test_shardcast_server_inputs.py.)"""

from __future__ import annotations

import asyncio

import pytest
from adversarial.shardcast.hostile_relay_kit import QUICK, SHARD, TRAINER, Lies, hostile_app, make_checkpoint
from typer.testing import CliRunner

from swarmrl.configs.shardcast import OriginConfig
from swarmrl.shardcast import Origin, ServerThread, ShardcastClient, ShardcastError
from swarmrl.shardcast.__main__ import app
from swarmrl.shardcast.manifest import SignedManifest


@pytest.fixture
def published(tmp_path):
    root = tmp_path / "ckpt"
    origin = Origin(root, TRAINER, "run-a", OriginConfig(shard_size=SHARD, delta=False))
    directory = make_checkpoint(root, 1)
    origin.publish(directory, 1)
    server = origin.serve_in_thread()
    yield server.url, directory, origin.store.manifest_bytes(1)
    server.stop()


def cli_fetch(url: str, dest, run_id: str):
    args = ["fetch", "--source", url, "--dest", str(dest), "--trainer-public-key", TRAINER.node_id]
    return CliRunner().invoke(app, [*args, "--run-id", run_id, "--version", "1"])


def test_fetch_cli_refuses_a_checkpoint_of_another_run(published, tmp_path):
    url, _, _ = published

    refused = cli_fetch(url, tmp_path / "x", "run-b")
    accepted = cli_fetch(url, tmp_path / "y", "run-a")

    assert refused.exit_code == 2  # one line, exit code 2
    assert "belongs to run 'run-a', not 'run-b'" in refused.output
    assert not (tmp_path / "x" / "step_1").exists()
    assert accepted.exit_code == 0, accepted.output
    assert (tmp_path / "y" / "step_1" / "model.safetensors").is_file()


def test_corrupt_shard_bytes_do_not_stay_in_partial(published, tmp_path):
    _, directory, raw = published
    lies = Lies(corrupt_shards={2})
    bad = ServerThread(lambda: hostile_app(directory, {1: raw}, lies)).start()
    dest = tmp_path / "w"

    async def run() -> None:
        async with ShardcastClient([bad.url], TRAINER.node_id, dest, QUICK) as client:
            await client.fetch(1)

    try:
        with pytest.raises(ShardcastError, match="does not match the signed manifest"):
            asyncio.run(run())
    finally:
        bad.stop()

    shard = next(
        s
        for s in SignedManifest.model_validate_json(raw).manifest.shards
        if s.path == "model.safetensors" and s.offset == 2 * SHARD
    )
    genuine = (directory / "model.safetensors").read_bytes()[shard.offset : shard.offset + shard.length]
    partial_file = next((dest / ".partial").glob("step_1.*/model.safetensors"))
    region = partial_file.read_bytes()[shard.offset : shard.offset + shard.length]
    corrupt = bytearray(genuine)
    corrupt[len(corrupt) // 2] ^= 0xFF
    assert region != bytes(corrupt)
    assert region == bytes(shard.length)  # zeroed; the verified shards around it are kept for a resume
