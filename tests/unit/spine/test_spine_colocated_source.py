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
    written: list[tuple[int, int, int, int | None]] = field(default_factory=list)

    def path(self, step: int, batch_index: int) -> Path:
        return self.rundir.rollouts(step) / f"w0-b{batch_index:04d}.parquet"

    def write(self, engine: FakeEngine, step: int, batch_index: int, prompts: int | None = None) -> Path:
        path = self.path(step, batch_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.written.append((engine.policy_step, step, batch_index, prompts))
        return path


def source_of(
    writer: FakeWriter, engine: FakeEngine, async_level: int, whole_files: bool = False
) -> ColocatedSource:
    return ColocatedSource(
        writer,  # type: ignore[arg-type]
        engine,  # type: ignore[arg-type]
        async_level,
        groups_per_step=32,
        prompts_per_file=16,
        whole_files=whole_files,
    )


def test_left_files_first_then_new_batches_at_the_next_free_index(tmp_path) -> None:
    rundir = RunDir(tmp_path)
    writer, engine = FakeWriter(rundir), FakeEngine(policy_step=2)
    source = source_of(writer, engine, async_level=0)
    left = writer.path(2, 0)
    left.parent.mkdir(parents=True)
    left.touch()

    assert source.new_files(2, set(), prompts_wanted=32) == [left]
    assert writer.written == []
    assert source.new_files(2, {left.name}, prompts_wanted=20) == [writer.path(2, 1)]
    # Its own file holds the prompts the step still wants, a full file at most.
    assert source.new_files(2, {left.name, "w0-b0001.parquet"}, prompts_wanted=5) == [writer.path(2, 2)]
    assert writer.written == [(2, 2, 1, 16), (2, 2, 2, 5)]
    source.close_step(2, {"files": 3}, next_prompts=36)
    assert rundir.is_complete(2)


def test_files_a_validator_will_judge_are_generated_whole(tmp_path) -> None:
    writer = FakeWriter(RunDir(tmp_path))
    source = source_of(writer, FakeEngine(policy_step=0), async_level=0, whole_files=True)
    assert source.new_files(0, set(), prompts_wanted=5) == [writer.path(0, 0)]
    assert writer.written == [(0, 0, 0, 16)]


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
    source = source_of(writer, FakeEngine(held), async_level)
    with pytest.raises(ColocatedPolicyError, match=message):
        source.new_files(step, set(), prompts_wanted=32)
    assert writer.written == []
    source.engine.policy_step = max(step - async_level, 0)  # the oldest policy the step accepts
    assert source.new_files(step, set(), prompts_wanted=32) == [writer.path(step, 0)]
