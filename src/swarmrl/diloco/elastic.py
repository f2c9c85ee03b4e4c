"""One elastic DiLoCo replica on torchft: joins a lighthouse quorum every sync round, heals from a peer.

Replicas can crash and restart at any time; survivors discard the round a crash interrupted and carry on
with the remaining members, and a (re)joining replica receives the global weights, outer and inner
optimizer state from a healthy peer before its first outer step.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators.torchft_comm import TorchFTCommunicator, replica_manager
from swarmrl.diloco.data import BatchSampler, load_corpus_split
from swarmrl.diloco.errors import DiLoCoConfigError
from swarmrl.diloco.model import build_tiny_causal_lm
from swarmrl.diloco.train import language_model_loss, make_inner_optimizer
from swarmrl.diloco.wrapper import DiLoCo


class ElasticReplicaReport(BaseModel):
    replica_rank: int = Field(description="Data shard of this replica.")
    rounds_committed: int = Field(description="torchft step (committed sync rounds) at exit.")
    inner_steps_run: int = Field(description="Inner steps this process ran itself.")
    rounds_discarded: int = Field(description="Rounds this replica saw fail (e.g. a peer died mid-round).")
    global_sha256: str = Field(
        description="sha256 of the fp32 global weights at exit (equal across replicas)."
    )


def global_weights_digest(diloco: DiLoCo) -> str:
    digest = hashlib.sha256()
    for fragment in diloco.fragments:
        for tensor in fragment.global_params:
            digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def _target_rounds(stop_file: Path | None, max_rounds: int) -> int:
    """The run's length may be decided while it runs: an integer written to `stop_file` caps it."""
    if stop_file is None or not stop_file.exists():
        return max_rounds
    try:
        return min(int(stop_file.read_text().strip()), max_rounds)
    except ValueError:
        return max_rounds


def run_elastic_replica(
    config: DiLoCoConfig,
    replica_rank: int,
    lighthouse_addr: str,
    max_rounds: int,
    progress_file: Path,
    stop_file: Path | None = None,
    min_replicas: int = 2,
    timeout_s: float = 10.0,
) -> ElasticReplicaReport:
    """Train until `max_rounds` (or the stop file's count) sync rounds are committed; report to progress_file."""
    if config.codec != "fp32" or config.fragments != 1 or config.overlap_steps != 0:
        raise DiLoCoConfigError("elastic DiLoCo runs the fp32 codec with one fragment and no overlap")
    # Imported here: torchft is the optional `elastic` extra.
    from torchft import ProcessGroupGloo

    torch.set_num_threads(config.threads_per_worker)
    split = load_corpus_split(config.data, replica_rank, config.workers)
    sampler = BatchSampler(
        split.train_tokens, config.data.seq_len, config.data.batch_size, config.data.seed + replica_rank
    )
    model = build_tiny_causal_lm(config.model)
    inner, schedule = make_inner_optimizer(model, config.inner, config.total_steps)
    timeout = timedelta(seconds=timeout_s)
    manager, _store = replica_manager(
        ProcessGroupGloo(timeout=timeout),
        replica_id=f"replica_{replica_rank}",
        lighthouse_addr=lighthouse_addr,
        min_replica_size=min_replicas,
        use_async_quorum=True,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=max(60.0, 6 * timeout_s)),
    )
    communicator = TorchFTCommunicator(manager, replica_rank, config.workers)
    diloco = DiLoCo(
        model,
        inner,
        communicator,
        make_codec("fp32"),
        inner_steps=config.inner_steps,
        outer_lr=config.outer.lr,
        outer_momentum=config.outer.momentum,
    )
    manager.register_state_dict_fn("diloco", diloco.restore_from_peer, diloco.snapshot_for_peer)
    steps_run = 0
    try:
        while manager.current_step() < _target_rounds(stop_file, max_rounds):
            loss = language_model_loss(model, sampler.next_batch())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.inner.grad_clip)
            diloco.step()
            diloco.zero_grad()
            schedule.step()
            steps_run += 1
            if steps_run % config.inner_steps == 0:
                progress_file.write_text(
                    json.dumps({"rounds": manager.current_step(), "steps_run": steps_run})
                )
        report = ElasticReplicaReport(
            replica_rank=replica_rank,
            rounds_committed=manager.current_step(),
            inner_steps_run=steps_run,
            rounds_discarded=sum(1 for record in diloco.sync_log if not record.committed),
            global_sha256=global_weights_digest(diloco),
        )
        progress_file.write_text(report.model_dump_json())
        return report
    finally:
        diloco.close()
        communicator.close()


def replica_process_main(
    config_json: str,
    replica_rank: int,
    lighthouse_addr: str,
    max_rounds: int,
    progress_file: str,
    stop_file: str | None,
) -> None:
    """Entry point for a spawned replica process (arguments are plain picklable values)."""
    run_elastic_replica(
        DiLoCoConfig.model_validate_json(config_json),
        replica_rank,
        lighthouse_addr,
        max_rounds,
        Path(progress_file),
        Path(stop_file) if stop_file else None,
    )
