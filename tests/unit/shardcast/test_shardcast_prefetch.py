"""Which version a node behind the trainer installs next: the next delta, or the newest version whole."""

from __future__ import annotations

import pytest

from swarmrl.shardcast.prefetch import next_in_line

MB = 1_000_000


@pytest.mark.parametrize(
    ("held", "newest", "delta", "expected"),
    [
        (-1, 7, 2.7 * MB, 7),  # nothing held: the newest, whole
        (6, 7, 2.7 * MB, 7),  # one behind: its delta
        (
            5,
            7,
            2.7 * MB,
            6,
        ),  # two behind: 2.7 MB to step 6 now, 2.7 more to 7, against 4.1 MB whole and a delta next
        (4, 7, 2.7 * MB, 7),  # three behind: 8.1 MB of deltas is more than 4.1 whole plus one delta
        (4, 7, 1.0 * MB, 5),  # three behind with small deltas: 3 MB in all, less than the whole
        (1, 7, 1.0 * MB, 7),  # six behind: 6 MB of deltas, more than 4.1 whole plus one
        (5, 7, 4.1 * MB, 6),  # a delta as big as the whole: as good either way, the chain holds a step sooner
        (5, 7, None, 7),  # no delta published: the newest, whole
    ],
)
def test_a_node_behind_follows_the_deltas_while_they_cost_at_most_one_more_than_the_whole(
    held, newest, delta, expected
):
    assert next_in_line(held, newest, int(4.1 * MB), None if delta is None else int(delta)) == expected
