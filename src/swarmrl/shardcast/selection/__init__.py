"""Which source a client or relay asks for a manifest or a shard: one policy interface (`base.py`), one file
per policy, chosen by the `type` of `[shardcast.client] selection` (`swarmrl/configs/shardcast.py`).

A new policy: subclass `SourcePolicy` in a file of its own (`ranked` and `pick`), add its config model to the
`SourceSelection` union, and a case to `source_policy` below (its `assert_never` is where a missed one ends).
"""

from __future__ import annotations

import random
from typing import assert_never

from swarmrl.configs.shardcast import ClientConfig, OrderedSelection, WeightedSelection
from swarmrl.shardcast.selection.base import SourcePolicy, SourceStats
from swarmrl.shardcast.selection.ordered import OrderedPolicy
from swarmrl.shardcast.selection.weighted import WeightedPolicy

__all__ = ["OrderedPolicy", "SourcePolicy", "SourceStats", "WeightedPolicy", "source_policy"]


def source_policy(sources: list[str], config: ClientConfig) -> SourcePolicy:
    """The policy `config.selection` names, over `sources`, with the client's back-off settings."""
    selection = config.selection
    match selection:
        case WeightedSelection(exploration=exploration):
            rng = random.Random(config.seed)
            return WeightedPolicy(sources, exploration, config.backoff_base_s, config.backoff_max_s, rng)
        case OrderedSelection():
            return OrderedPolicy(sources, config.backoff_base_s, config.backoff_max_s)
        case _:
            assert_never(selection)
