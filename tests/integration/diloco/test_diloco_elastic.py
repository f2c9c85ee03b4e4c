"""Elastic DiLoCo on torchft: kill one of three replicas mid-run, survivors go on, the restarted one heals."""

import json
import multiprocessing
from pathlib import Path

import pytest
import torch
from polling import wait_for

from swarmrl.configs.diloco import ByteCorpusConfig, DiLoCoConfig, TinyModelConfig
from swarmrl.diloco.elastic import replica_process_main

torch.set_num_threads(1)

CONFIG = DiLoCoConfig(
    workers=3,
    inner_steps=4,
    model=TinyModelConfig(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1),
    data=ByteCorpusConfig(max_bytes=1_000_000, seq_len=32, batch_size=2, eval_batches=1),
)
MAX_ROUNDS = 100_000  # the stop file decides the real length


pytestmark = pytest.mark.swarm


def _progress(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _rounds(path: Path) -> int:
    data = _progress(path)
    return int(data.get("rounds", data.get("rounds_committed", -1)))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replica_killed_mid_run_others_continue_and_restart_heals_from_peer(tmp_path):
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(
        bind="[::]:0", min_replicas=2, join_timeout_ms=500, heartbeat_timeout_ms=2000
    )
    context = multiprocessing.get_context("spawn")
    stop_file = tmp_path / "stop"
    progress = [tmp_path / f"replica{i}.json" for i in range(3)]
    processes: list[multiprocessing.Process] = []

    def start(rank: int) -> multiprocessing.Process:
        process = context.Process(
            target=replica_process_main,
            args=(
                CONFIG.model_dump_json(),
                rank,
                lighthouse.address(),
                MAX_ROUNDS,
                str(progress[rank]),
                str(stop_file),
            ),
        )
        process.start()
        processes.append(process)
        return process

    try:
        start(0), start(1)
        victim = start(2)
        wait_for(lambda: _rounds(progress[2]) >= 3, 150, "all three replicas to commit 3 rounds")
        victim.kill()
        victim.join(timeout=10)
        rounds_at_kill = max(_rounds(progress[0]), _rounds(progress[1]))
        wait_for(
            lambda: _rounds(progress[0]) >= rounds_at_kill + 5, 60, "survivors to go on without replica 2"
        )

        progress[2].unlink()
        start(2)
        rounds_at_restart = _rounds(progress[0])
        # A healed replica's round counter jumps to its peers' while it has run only a few steps itself.
        wait_for(lambda: _rounds(progress[2]) > rounds_at_restart, 120, "the restarted replica to heal")
        healed = _progress(progress[2])
        assert healed["steps_run"] < healed["rounds"] * CONFIG.inner_steps

        stop_file.write_text(str(max(_rounds(p) for p in progress) + 3))
        for process in (processes[0], processes[1], processes[-1]):
            process.join(timeout=60)
            assert process.exitcode == 0
        reports = [_progress(p) for p in progress]
        assert len({r["rounds_committed"] for r in reports}) == 1
        assert len({r["global_sha256"] for r in reports}) == 1, "replicas disagree on the global weights"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
        lighthouse.shutdown()
