"""What `rl`, `demo` and `sft` show while they work: live views on a terminal, plain lines anywhere else (a log
file, a pipe, CI), never more than `INTERVAL` seconds apart while SFT, RL, an eval or a wait runs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from swarmrl.eval_metrics import at_k_scores, is_eval_record
from swarmrl.progress_lines import ProgressLines, duration, eta, seconds_per_step, step_line
from swarmrl.rundir import RunDir

INTERVAL = 5.0  # seconds: the longest a plain-line view stays silent
PLAIN_WIDTH = 200  # columns of a table printed off a terminal

SftProgress = Callable[[int, float], None]


def plain_lines(console: Console) -> ProgressLines:
    """Lines to `console` when it is not a terminal; a no-op view on a terminal."""
    return ProgressLines(
        lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True),
        interval=INTERVAL,
        enabled=not console.is_terminal,
    )


@contextmanager
def sft_progress(console: Console, steps: int) -> Iterator[SftProgress]:
    """The callback `prepare_run` reports SFT steps to: a bar on a terminal; elsewhere a line every few seconds
    (step, loss, steps/s, ETA), and while the task source, tokenizer and model are built, how long that took."""
    if console.is_terminal:
        with Progress(
            TextColumn("[bold]SFT warm start"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} loss {task.fields[loss]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("sft", total=steps, loss="-")
            yield lambda step, loss: bar.update(task, completed=step, loss=f"{loss:.3f}")
        return
    started = time.monotonic()
    with plain_lines(console) as lines:
        what = (
            f"the starting policy: tasks, tokenizer, model, {steps} SFT steps"
            if steps
            else "the starting policy"
        )
        lines.note(f"preparing {what}")
        lines.state(lambda: f"preparing {what} · {_since(started)}")
        first: list[float] = []

        def report(step: int, loss: float) -> None:
            first[:] = first or [time.monotonic()]
            elapsed = time.monotonic() - first[0]
            rate = f"{step / elapsed:.1f} steps/s" if elapsed > 0 else "- steps/s"
            line = f"sft step {step}/{steps} · loss {loss:.3f} · {rate} · ETA {eta(step, steps, elapsed)}"
            lines.state(line)
            if step == steps:
                lines.note(line)

        yield report


@contextmanager
def waiting(console: Console, what: str) -> Iterator[None]:
    """Around a long call with no progress of its own (an eval, a model load): a spinner on a terminal, a line
    every few seconds elsewhere."""
    if console.is_terminal:
        with console.status(what):
            yield
        return
    started = time.monotonic()
    with plain_lines(console) as lines:
        lines.note(what)
        lines.state(lambda: f"{what} · {_since(started)}")
        yield


def _since(started: float) -> str:
    return duration(time.monotonic() - started)


class StepLines:
    """Off a terminal, what `rl` and `demo` print while the trainer trains: a line per policy step (and per
    online eval) as metrics.jsonl grows; while a step is on its way, its rollout files so far and how long."""

    def __init__(self, rundir: RunDir, total_steps: int, lines: ProgressLines) -> None:
        self.rundir, self.total_steps, self.lines = rundir, total_steps, lines
        self.printed = 0
        self.trained = 0
        self.since = time.monotonic()

    def poll(self) -> None:
        records = self.rundir.read_metrics()
        for index in range(self.printed, len(records)):
            record = records[index]
            if is_eval_record(record):
                scores = " · ".join(f"{name} {value:.3f}" for name, value in at_k_scores(record).items())
                self.lines.note(f"eval of step {record['step']}: {scores}")
                continue
            self.lines.note(step_line(record, self.total_steps, seconds_per_step(records[: index + 1])))
            self.trained, self.since = int(record["step"]), time.monotonic()
        self.printed = len(records)
        self.lines.state(self.waiting)

    def waiting(self) -> str:
        files = len(self.rundir.rollout_files(self.trained))
        after = f"step {self.trained}" if self.trained else "the start"
        return (
            f"step {self.trained + 1}/{self.total_steps}: {files} rollout file(s) in, "
            f"{_since(self.since)} since {after}"
        )
