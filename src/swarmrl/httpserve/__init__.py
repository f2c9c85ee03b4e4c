"""What every HTTP server of swarmrl puts in front of its application: limits on slow and numerous clients.

`ConnectionLimits` (the knobs), `ConnectionGuard` (one server's open connections, caps and read deadlines),
`guarded_uvicorn_config` (the coordinator) and `GuardedAppRunner` (the shardcast origin and relays); `Notifier`
wakes their long polls.

Names are imported on first use (`swarmrl.lazy_exports`): importing the
package must not load the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "GuardedAppRunner": "swarmrl.httpserve.aiohttp_runner",
    "ConnectionGuard": "swarmrl.httpserve.guard",
    "GuardedProtocol": "swarmrl.httpserve.guard",
    "raise_open_file_limit": "swarmrl.httpserve.guard",
    "guarded_uvicorn_config": "swarmrl.httpserve.uvicorn_config",
    "Notifier": "swarmrl.httpserve.notify",
}

__all__ = [
    "ConnectionGuard",
    "GuardedAppRunner",
    "GuardedProtocol",
    "Notifier",
    "guarded_uvicorn_config",
    "raise_open_file_limit",
]

if TYPE_CHECKING:
    from swarmrl.httpserve.aiohttp_runner import GuardedAppRunner
    from swarmrl.httpserve.guard import ConnectionGuard, GuardedProtocol, raise_open_file_limit
    from swarmrl.httpserve.notify import Notifier
    from swarmrl.httpserve.uvicorn_config import guarded_uvicorn_config


__getattr__ = lazy_exports(__name__, _EXPORTS)
