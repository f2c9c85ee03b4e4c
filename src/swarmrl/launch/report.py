"""What a person looks at after a run: a live table while it trains and a reward-curve PNG at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from swarmrl.eval_metrics import at_k_scores, is_eval_record
from swarmrl.progress_lines import function_means, samples_per_second


@contextmanager
def live_table(console: Console, table: RenderableType, refresh_per_second: float) -> Iterator[Live]:
    """A live table that stays on screen; off a terminal (a log, a pipe) its last line gets the newline rich
    leaves off, so what is printed next starts on a line of its own."""
    try:
        with Live(table, console=console, refresh_per_second=refresh_per_second, transient=False) as live:
            yield live
    finally:
        if not console.is_terminal:
            console.line()


LIVE_ROWS = 8  # steps a live table shows while the run trains
FINAL_ROWS = 200  # steps the table at the end shows; beyond, it says how many are left out


def metrics_table(records: list[dict[str, Any]], last: int = LIVE_ROWS) -> Table:
    """The last `last` training steps, one row each; the caption says how many earlier ones are not shown.
    Each reward function of the run gets a column of its mean reward (`rewards/<name>/mean`)."""
    trained = [r for r in records if not is_eval_record(r)]
    functions = list(dict.fromkeys(name for r in trained for name in function_means(r)))
    hidden = max(0, len(trained) - last)
    caption = f"{hidden} earlier step(s) not shown: metrics.jsonl holds every step" if hidden else None
    table = Table(title="swarmrl · trainer steps", caption=caption, expand=False)
    for column in (
        "step",
        "sampled",
        "trained",
        "loss",
        "lag",
        "dropped",
        "refused",
        "samples/s",
        *functions,
    ):
        table.add_column(column, justify="right")
    for record in trained[hidden:]:
        rate = samples_per_second(record)
        means = function_means(record)
        table.add_row(
            str(record["step"]),
            f"{record['sampled_reward']:.3f}",
            f"{record['reward']:.3f}",
            f"{record.get('loss', 0.0):+.4f}",
            f"{record.get('policy_lag', 0.0):.1f}",
            f"{100 * record.get('dropped_group_fraction', 0.0):.0f}%",
            str(int(record.get("refused_files", 0))),
            f"{rate:.1f}" if rate is not None else "-",
            *(f"{means[name]:.3f}" if name in means else "-" for name in functions),
        )
    return table


def plot_reward_curve(records: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Rewards of the training steps, with the online evals' held-out avg@k and pass@k when the run has them."""
    trained = [r for r in records if not is_eval_record(r)]
    evals = eval_curves(records)
    if not trained and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in trained]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, [r["sampled_reward"] for r in trained], label="all samples")
    ax.plot(
        steps, [r["reward"] for r in trained], label="trained groups (non-zero advantage)", linestyle="--"
    )
    for name, points in evals.items():
        # avg@k <= pass@k, so the two often overlap: pass@k is dotted to keep avg@k visible under it.
        style = ":" if name.startswith("pass@") else "-"
        ax.plot(*zip(*points, strict=True), marker="o", linestyle=style, label=f"held-out {name}")
    ax.set_xlabel("policy step")
    ax.set_ylabel("mean reward / held-out accuracy" if evals else "mean reward")
    ax.set_title(title or "reward per policy step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def eval_curves(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """(step, value) points per online-eval score (`avg@4`, `pass@4`), in step order."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for record in sorted((r for r in records if is_eval_record(r)), key=lambda r: r["step"]):
        for name, value in at_k_scores(record).items():
            curves.setdefault(name, []).append((record["step"], value))
    return curves
