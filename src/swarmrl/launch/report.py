"""What a person looks at after a run: a live table while it trains and a reward-curve PNG at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table


def metrics_table(records: list[dict[str, Any]], last: int = 8) -> Table:
    table = Table(title="swarmrl · trainer steps", expand=False)
    for column in ("step", "sampled", "trained", "loss", "lag", "dropped", "refused", "samples/s"):
        table.add_column(column, justify="right")
    for record in records[-last:]:
        seconds = record.get("wait_seconds", 0.0) + record.get("train_seconds", 0.0)
        table.add_row(
            str(record["step"]),
            f"{record['sampled_reward']:.3f}",
            f"{record['reward']:.3f}",
            f"{record.get('loss', 0.0):+.4f}",
            f"{record.get('policy_lag', 0.0):.1f}",
            f"{100 * record.get('dropped_group_fraction', 0.0):.0f}%",
            str(int(record.get("refused_files", 0))),
            f"{record['samples'] / seconds:.1f}" if seconds > 0 else "-",
        )
    return table


def plot_reward_curve(records: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, [r["sampled_reward"] for r in records], label="all samples")
    ax.plot(
        steps, [r["reward"] for r in records], label="trained groups (non-zero advantage)", linestyle="--"
    )
    ax.set_xlabel("policy step")
    ax.set_ylabel("mean reward")
    ax.set_title(title or "reward per policy step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
