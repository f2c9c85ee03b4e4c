"""`type = "weighted"` (the default): sample a source by its measured success × throughput.

A source's weight is its smoothed success rate times its throughput estimate, divided by 20 for every corrupt
shard, forged manifest or false announcement it sent, so a trickling source sinks to almost no weight at once.
With probability `exploration` the pick is uniform, so a source that was slow once can recover.
"""

from __future__ import annotations

import random

from swarmrl.shardcast.selection.base import SourcePolicy

CORRUPTION_PENALTY = 20.0
MIN_WEIGHT = 1e-9


class WeightedPolicy(SourcePolicy):
    def __init__(
        self,
        urls: list[str],
        exploration: float = 0.1,
        backoff_base_s: float = 0.25,
        backoff_max_s: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(urls, backoff_base_s, backoff_max_s)
        self.exploration = exploration
        self.rng = rng or random.Random()

    def weight(self, url: str) -> float:
        stats = self.stats[url]
        return stats.success_rate() * self.throughput(url) / (CORRUPTION_PENALTY**stats.corrupt)

    def ranked(self, candidates: list[str]) -> list[str]:
        return sorted(candidates, key=self.weight, reverse=True)

    def pick(self, ready: list[str]) -> str:
        if self.rng.random() < self.exploration:
            return self.rng.choice(ready)
        weights = [max(self.weight(url), MIN_WEIGHT) for url in ready]  # all-zero weights cannot be sampled
        return self.rng.choices(ready, weights=weights, k=1)[0]
