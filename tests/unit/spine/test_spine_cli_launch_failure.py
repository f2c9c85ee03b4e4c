"""A launcher whose role process failed exits 1 with that process's message (2 with its one line when it stopped
on a failure a person can fix), not a traceback; Ctrl-C says how to resume; its SIGTERM
handler lasts as long as the launcher."""

import signal

import pytest
import typer

from swarmrl.cli import launchers
from swarmrl.launch.processes import LaunchError


def test_a_failed_role_process_ends_the_launcher_with_its_message(capsys):
    failure = "trainer exited with code 1; last lines of its log:\nNotEnoughRollouts: step 0: [0/16 groups]"
    with pytest.raises(typer.Exit) as exit_info, launchers.supervising():
        raise LaunchError(failure)
    assert exit_info.value.exit_code == 1
    out = capsys.readouterr().out
    assert "NotEnoughRollouts: step 0: [0/16 groups]" in out  # brackets printed as written, not as markup
    assert "Traceback" not in out


def test_other_errors_pass_through():
    with pytest.raises(ValueError), launchers.supervising():
        raise ValueError("not a launch failure")


def test_sigterm_unwinds_only_while_supervising():
    before = signal.getsignal(signal.SIGTERM)
    with launchers.supervising():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_role_that_stopped_on_an_expected_failure_ends_the_launcher_with_its_line_and_code_2(capsys):
    line = "trainer exited with code 2: no space left on the device holding runs/x (details in runs/x/logs/trainer.log)"
    with pytest.raises(typer.Exit) as exit_info, launchers.supervising():
        raise LaunchError(line, exit_code=2)
    assert exit_info.value.exit_code == 2
    assert capsys.readouterr().err == f"error: {line}\n"


def test_ctrl_c_says_the_same_command_resumes(tmp_path, capsys):
    from swarmrl.rundir import RunDir

    with pytest.raises(typer.Exit) as exit_info, launchers.supervising(resumable=RunDir(tmp_path)):
        raise KeyboardInterrupt
    assert exit_info.value.exit_code == 130
    assert capsys.readouterr().err == (
        f"stopped: run the same command again to resume from the last checkpoint ({tmp_path})\n"
    )
