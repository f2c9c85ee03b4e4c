"""When a pack in the run stops being worth its units, from what its trusted judges measured (pure).

- its verifier failed on more than `max_failure_share` of the completions validators judged of its last
  `window_groups` rows (at least `min_groups`): a verifier that starts failing late is caught by what it does
  now, not diluted by everything it did before;
- a validator and the trainer scored the same completions of a file differently on more than
  `max_disagreements` files: the verifier is not deterministic across judges (a lie, or a dependence on the
  machine), and its author's unpaid credit is wiped;
- its groups stopped being informative: of the last `window_groups` groups of its rows offered to the
  trainer's online filter (at least `min_groups`), fewer than `min_informative_share` had differing rewards —
  the policy now always or never solves its rows, so they train nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarmrl.configs.task_packs import RetirementConfig


@dataclass(frozen=True)
class PackHealth:
    judged_rows: int  # the most recent rows (groups) validators judged, about `window_groups` of them
    judged: int  # their completions
    failed: int  # of those, the ones its verifier failed on
    disagreements: int  # files ever scored differently by a validator and the trainer
    window_groups: int  # the most recent groups offered to the filter, about `window_groups` of them
    window_kept: int


@dataclass(frozen=True)
class Retirement:
    reason: str
    for_cause: bool  # the verifier failed or disagreed: the author's unpaid credit is wiped


def retirement_of(health: PackHealth, config: RetirementConfig) -> Retirement | None:
    if health.disagreements > config.max_disagreements:
        return Retirement(
            f"a validator and the trainer scored its completions differently on {health.disagreements} file(s) "
            f"(at most {config.max_disagreements} tolerated)",
            for_cause=True,
        )
    if health.judged_rows >= config.min_groups and health.failed / health.judged > config.max_failure_share:
        return Retirement(
            f"its verifier failed on {health.failed} of the {health.judged} completions of its last "
            f"{health.judged_rows} rows judged (share {health.failed / health.judged:.3f} > "
            f"{config.max_failure_share:g})",
            for_cause=True,
        )
    if health.window_groups >= config.min_groups:
        share = health.window_kept / health.window_groups
        if share < config.min_informative_share:
            return Retirement(
                f"{health.window_kept} of its last {health.window_groups} groups were informative "
                f"(share {share:.3f} < {config.min_informative_share:g}): the policy always or never solves it now",
                for_cause=False,
            )
    return None
