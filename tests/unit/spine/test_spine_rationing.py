"""Local workers generate only the rollout files the trainer asks for (REQUEST), not files nobody reads."""

from swarmrl.rundir import RunDir, RunDirSource


def write(rundir: RunDir, step: int, name: str) -> None:
    directory = rundir.rollouts(step)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"x")


def test_workers_produce_until_the_request_is_met(tmp_path):
    rundir = RunDir(tmp_path)
    assert rundir.wants_files(0)  # nothing asked yet: produce, as before the trainer starts
    source = RunDirSource(rundir, files_per_step=2)
    source.open_step(0)
    write(rundir, 0, "w0-b0000.parquet")
    assert rundir.wants_files(0)
    write(rundir, 0, "w1-b0000.parquet")
    assert not rundir.wants_files(0)


def test_the_trainer_asks_for_one_more_file_only_when_it_has_read_them_all(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, files_per_step=1)
    source.open_step(0)
    write(rundir, 0, "a.parquet")
    assert [p.name for p in source.new_files(0, set())] == ["a.parquet"]
    assert rundir.requested_files(0) == 1
    assert source.new_files(0, {"a.parquet"}) == []
    assert rundir.requested_files(0) == 2 and rundir.wants_files(0)


def test_closing_a_step_asks_for_the_next_as_many_files_as_it_read(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, files_per_step=2)
    source.close_step(3, {"outcomes": {"a": "trained", "b": "trained", "c": "stale"}})
    assert rundir.is_complete(3)
    assert rundir.requested_files(4) == 3
    source.close_step(4, {"outcomes": {"a": "trained"}})
    assert rundir.requested_files(5) == 2  # never fewer than a step needs when every group is informative


def test_a_restarted_trainer_keeps_a_larger_request(tmp_path):
    rundir = RunDir(tmp_path)
    rundir.request_files(2, 5)
    RunDirSource(rundir, files_per_step=2).open_step(2)
    assert rundir.requested_files(2) == 5


def test_workers_are_idle_once_the_newest_step_asked_for_has_its_files(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, files_per_step=2)
    assert not source.workers_idle()  # nothing asked yet: workers produce
    source.open_step(0)
    write(rundir, 0, "a.parquet")
    assert not source.workers_idle()
    write(rundir, 0, "b.parquet")
    assert source.workers_idle()
    source.close_step(0, {"outcomes": {"a": "trained", "b": "trained"}})
    assert not source.workers_idle()  # step 1 asked for two files
    write(rundir, 1, "a.parquet")
    write(rundir, 1, "b.parquet")
    assert source.workers_idle()
    assert source.new_files(1, {"a.parquet", "b.parquet"}) == []  # read them all: one more is asked for
    assert not source.workers_idle()
