"""What every HTTP server of swarmrl puts in front of its application: limits on slow and numerous clients.

`ConnectionLimits` (the knobs), `ConnectionGuard` (one server's open connections, caps and read deadlines),
`guarded_uvicorn_config` (the coordinator) and `GuardedAppRunner` (the shardcast origin and relays).
"""

from swarmrl.httpserve.aiohttp_runner import GuardedAppRunner
from swarmrl.httpserve.guard import ConnectionGuard, GuardedProtocol, raise_open_file_limit
from swarmrl.httpserve.limits import ConnectionLimits
from swarmrl.httpserve.uvicorn_config import guarded_uvicorn_config

__all__ = [
    "ConnectionGuard",
    "ConnectionLimits",
    "GuardedAppRunner",
    "GuardedProtocol",
    "guarded_uvicorn_config",
    "raise_open_file_limit",
]
