"""Lets test packages share helpers (`from integration.spine.spine_helpers import ...`); puts the swarm-scale
tests first.

Tests marked `xdist_group("swarms")` start a swarm, islands or elastic replicas: many processes with deadlines.
`make test` runs them on one worker, one at a time (two at once on a 2-core machine starve each other past
their deadlines), and they go first so that worker starts on them while the others share the rest.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    # A stable sort: the order of the tests within each part is kept.
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)
