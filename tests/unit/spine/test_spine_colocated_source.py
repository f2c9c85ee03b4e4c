"""The rollout source of a colocated run: files a killed run left come first, new batches get the next free
index, and no batch is generated with a policy the step may not use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from swarmrl.generation.colocated import NO_POLICY, ColocatedPolicyError, ColocatedSource
from swarmrl.rundir import RunDir


@dataclass
class FakeEngine:
    policy_step: int


@dataclass
class FakeWriter:
    """Writes an empty file where worker 0's batch would go, and records (policy, step, batch index)."""

    rundir: RunDir
    written: list[tuple[int, int, int]] = field(default_factory=list)

    def path(self, step: int, batch_index: int) -> Path:
        return self.rundir.rollouts(step) / f"w0-b{batch_index:04d}.parquet"

    def write(self, engine: FakeEngine, step: int, batch_index: int) -> Path:
        path = self.path(step, batch_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.written.append((engine.policy_step, step, batch_index))
        return path


def test_left_files_first_then_new_batches_at_the_next_free_index(tmp_path) -> None:
    rundir = RunDir(tmp_path)
    writer, engine = FakeWriter(rundir), FakeEngine(policy_step=2)
    source = ColocatedSource(writer, engine, async_level=0)  # type: ignore[arg-type]
    left = writer.path(2, 0)
    left.parent.mkdir(parents=True)
    left.touch()

    assert source.new_files(2, set()) == [left]
    assert writer.written == []
    assert source.new_files(2, {left.name}) == [writer.path(2, 1)]
    assert source.new_files(2, {left.name, "w0-b0001.parquet"}) == [writer.path(2, 2)]
    assert writer.written == [(2, 2, 1), (2, 2, 2)]
    source.close_step(2, {"files": 3})
    assert rundir.is_complete(2)


@pytest.mark.parametrize(
    ("held", "async_level", "step", "message"),
    [
        (NO_POLICY, 2, 0, "the engine holds no policy yet"),
        (1, 1, 3, "needs a policy of step 2 or newer .async_level 1.; the engine holds policy 1"),
        (4, 0, 5, "needs a policy of step 5 or newer"),
    ],
)
def test_a_step_is_never_generated_with_a_policy_it_may_not_use(
    tmp_path, held: int, async_level: int, step: int, message: str
) -> None:
    writer = FakeWriter(RunDir(tmp_path))
    source = ColocatedSource(writer, FakeEngine(held), async_level)  # type: ignore[arg-type]
    with pytest.raises(ColocatedPolicyError, match=message):
        source.new_files(step, set())
    assert writer.written == []
    source.engine.policy_step = max(step - async_level, 0)  # the oldest policy the step accepts
    assert source.new_files(step, set()) == [writer.path(step, 0)]
