"""Local workers generate only the prompts the trainer asks for (REQUEST), not files nobody reads."""

import pytest

from swarmrl.rundir import FileRequest, RunDir, RunDirSource


def write(rundir: RunDir, step: int, name: str) -> None:
    directory = rundir.rollouts(step)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"x")


def test_workers_produce_until_the_request_is_met(tmp_path):
    rundir = RunDir(tmp_path)
    assert rundir.wants_files(0)  # nothing asked yet: produce, as before the trainer starts
    assert rundir.next_file_prompts(0, full=16) == 16
    source = RunDirSource(rundir, groups_per_step=32, prompts_per_file=16)
    source.open_step(0)
    assert rundir.file_request(0) == FileRequest(2, 16)
    write(rundir, 0, "w0-b0000.parquet")
    assert rundir.wants_files(0)
    write(rundir, 0, "w1-b0000.parquet")
    assert not rundir.wants_files(0)
    assert rundir.next_file_prompts(0, full=16) is None


def test_only_the_last_file_asked_for_is_smaller(tmp_path):
    rundir = RunDir(tmp_path)
    rundir.request_files(3, FileRequest.for_prompts(39, per_file=16))
    assert rundir.file_request(3) == FileRequest(3, 7)
    assert rundir.next_file_prompts(3, full=16) == 16
    write(rundir, 3, "a.parquet")
    assert rundir.next_file_prompts(3, full=16) == 16
    write(rundir, 3, "b.parquet")
    assert rundir.next_file_prompts(3, full=16) == 7
    write(rundir, 3, "c.parquet")
    assert rundir.next_file_prompts(3, full=16) is None
    # A worker never writes more than a full file, whatever the request says.
    rundir.request_files(4, FileRequest(1, 40))
    assert rundir.next_file_prompts(4, full=16) == 16


@pytest.mark.parametrize(
    ("prompts", "per_file", "after", "expected"),
    [
        (32, 16, 0, FileRequest(2, 16)),
        (33, 16, 0, FileRequest(3, 1)),
        (5, 16, 3, FileRequest(4, 5)),
        (0, 16, 2, FileRequest(3, 1)),
    ],
)
def test_a_request_in_prompts_is_full_files_and_a_smaller_last_one(prompts, per_file, after, expected):
    assert FileRequest.for_prompts(prompts, per_file, after=after) == expected


@pytest.mark.parametrize(
    "text", ["", "{", "[]", '{"file": 2}', '{"files": "two"}', '{"files": 2, "last_file_prompts": "x"}']
)
def test_a_malformed_request_reads_as_none_and_workers_produce(tmp_path, text):
    rundir = RunDir(tmp_path)
    rundir.rollouts(1).mkdir(parents=True)
    rundir.request_marker(1).write_text(text)
    assert rundir.file_request(1) is None
    assert rundir.next_file_prompts(1, full=8) == 8


def test_the_trainer_asks_for_the_prompts_it_still_wants_only_when_it_has_read_every_file(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, groups_per_step=16, prompts_per_file=16)
    source.open_step(0)
    write(rundir, 0, "a.parquet")
    assert [p.name for p in source.new_files(0, set(), prompts_wanted=16)] == ["a.parquet"]
    assert rundir.file_request(0) == FileRequest(1, 16)
    assert source.new_files(0, {"a.parquet"}, prompts_wanted=5) == []
    assert rundir.file_request(0) == FileRequest(2, 5) and rundir.wants_files(0)
    assert rundir.next_file_prompts(0, full=16) == 5
    assert source.new_files(0, {"a.parquet"}, prompts_wanted=9) == []  # asked already: not asked again
    assert rundir.file_request(0) == FileRequest(2, 5)
    write(rundir, 0, "b.parquet")
    assert source.new_files(0, {"a.parquet", "b.parquet"}, prompts_wanted=20) == []
    assert rundir.file_request(0) == FileRequest(4, 4)  # 20 more prompts: one full file and 4


def test_closing_a_step_asks_for_the_prompts_the_feed_expects_the_next_to_want(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, groups_per_step=32, prompts_per_file=16)
    source.close_step(3, {"outcomes": {"a": "trained"}}, next_prompts=39)
    assert rundir.is_complete(3)
    assert rundir.file_request(4) == FileRequest(3, 7)


def test_a_restarted_trainer_keeps_a_larger_request(tmp_path):
    rundir = RunDir(tmp_path)
    rundir.request_files(2, FileRequest(5, 3))
    RunDirSource(rundir, groups_per_step=32, prompts_per_file=16).open_step(2)
    assert rundir.file_request(2) == FileRequest(5, 3)
    rundir.request_files(3, FileRequest(1))  # fewer files than every-group-informative needs: raised
    RunDirSource(rundir, groups_per_step=32, prompts_per_file=16).open_step(3)
    assert rundir.file_request(3) == FileRequest(2, 16)


def test_workers_are_idle_once_the_newest_step_asked_for_has_its_files(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, groups_per_step=2, prompts_per_file=1)
    assert not source.workers_idle()  # nothing asked yet: workers produce
    source.open_step(0)
    write(rundir, 0, "a.parquet")
    assert not source.workers_idle()
    write(rundir, 0, "b.parquet")
    assert source.workers_idle()
    source.close_step(0, {"outcomes": {"a": "trained", "b": "trained"}}, next_prompts=2)
    assert not source.workers_idle()  # step 1 asked for two files
    write(rundir, 1, "a.parquet")
    write(rundir, 1, "b.parquet")
    assert source.workers_idle()
    assert (
        source.new_files(1, {"a.parquet", "b.parquet"}, prompts_wanted=1) == []
    )  # read them all: more asked
    assert not source.workers_idle()


def test_files_a_validator_will_judge_stay_whole_batches(tmp_path):
    rundir = RunDir(tmp_path)
    source = RunDirSource(rundir, groups_per_step=32, prompts_per_file=16, whole_files=True)
    source.close_step(0, {}, next_prompts=39)
    assert rundir.file_request(1) == FileRequest(3)
    assert rundir.next_file_prompts(1, full=16) == 16
    source.open_step(1)
    for name in ("a.parquet", "b.parquet", "c.parquet"):
        write(rundir, 1, name)
    assert source.new_files(1, {"a.parquet", "b.parquet", "c.parquet"}, prompts_wanted=5) == []
    assert rundir.file_request(1) == FileRequest(4)
    write(rundir, 1, "d.parquet")
    assert rundir.next_file_prompts(1, full=16) is None
