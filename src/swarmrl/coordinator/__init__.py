"""The coordinator: a trusted HTTP service (FastAPI + SQLAlchemy) and the signed client every role uses.

`api.py` is the wire schema both sides share; `server/` the service, `rules/` the protocol over its stored
state, `store/` the tables and upload storage; `client.py` what nodes, validators, trainer and operators call, one client each, over `transport.py`.

Names are imported on first use (`swarmrl.lazy_exports`): importing the
package must not load the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "AdminClient": "swarmrl.coordinator.client",
    "NodeClient": "swarmrl.coordinator.client",
    "PublicReads": "swarmrl.coordinator.client",
    "TrainerClient": "swarmrl.coordinator.client",
    "ValidatorClient": "swarmrl.coordinator.client",
    "CoordinatorError": "swarmrl.coordinator.errors",
    "task_seed": "swarmrl.coordinator.seeds",
}

__all__ = [
    "AdminClient",
    "CoordinatorError",
    "NodeClient",
    "PublicReads",
    "TrainerClient",
    "ValidatorClient",
    "task_seed",
]

if TYPE_CHECKING:
    from swarmrl.coordinator.client import (
        AdminClient,
        NodeClient,
        PublicReads,
        TrainerClient,
        ValidatorClient,
    )
    from swarmrl.coordinator.errors import CoordinatorError
    from swarmrl.coordinator.seeds import task_seed


__getattr__ = lazy_exports(__name__, _EXPORTS)
