"""Online evals: every `eval.every_steps` policy steps the trainer scores its policy on held-out tasks
(avg@k and pass@k) while it goes on training.

Why the trainer: it is the one process that holds every policy the moment it exists (workers load only the
checkpoints their async level asks for, and in a swarm they are untrusted), so it copies the weights into a
private engine in memory, with no checkpoint round-trip, and its records reach the run's metric sinks.
Why a thread: generation runs beside training, overlapping the next steps' wait for rollouts; the training
thread pays only the in-place weight copy, and waits for an eval only when the next one is due while the
previous still runs (evals slower than `every_steps` steps). Finished evals are logged from the training
thread, so the sinks never see two writers. An eval still running when a trainer is killed is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from swarmrl.configs import RunConfig
from swarmrl.eval_metrics import eval_record
from swarmrl.evaluation import HeldOutEval

Record = dict[str, Any]


class OnlineEvaluator:
    """Evaluates the policies of steps that are multiples of `every_steps`, one at a time, off the caller's
    thread; `log` gets each eval's record on the caller's thread (in `policy_ready` or `finish`)."""

    def __init__(self, config: RunConfig, checkpoint: Path, step: int, log: Callable[[Record], None]) -> None:
        self.every_steps = config.eval.every_steps
        self._eval = HeldOutEval.from_checkpoint(config, checkpoint, step, config.eval.online_num_tasks)
        self._log = log
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="online-eval")
        self._pending: Future[Record] | None = None

    def policy_ready(self, step: int, weights: Mapping[str, torch.Tensor] | None = None) -> None:
        """Log the evals that finished, then start one of policy `step` if it is due; `weights` are that
        policy's (None: the checkpoint the evaluator was built from)."""
        if self._pending is not None and self._pending.done():
            self._log_pending()
        if step % self.every_steps:
            return
        # The engine's weights are about to change under a running eval: let it finish first.
        self._log_pending()
        if weights is not None:
            self._eval.engine.load_weights(weights, policy_step=step)
        self._pending = self._pool.submit(self._evaluate, step)

    def finish(self) -> None:
        """Wait for the eval in flight and log it: the end of training, whose last evals belong to the run."""
        self._log_pending()

    def close(self) -> None:
        """Stop the thread (after the eval in flight, whose record is dropped unless `finish` logged it)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _evaluate(self, step: int) -> Record:
        started = time.monotonic()
        result = self._eval.run()
        return eval_record(step, result, time.monotonic() - started)

    def _log_pending(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._log(pending.result())  # an eval's exception surfaces here, on the training thread
