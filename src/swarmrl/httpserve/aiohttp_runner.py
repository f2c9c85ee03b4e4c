"""aiohttp behind the connection guard (the shardcast origin and relays).

aiohttp closes a connection whose request head has not arrived `keepalive_timeout` seconds after it opened or
after the previous response (however slowly bytes trickle in), and reads at most `lingering_time` of a body
nobody asked for: the read deadlines are its own, set here from the limits. The caps on open connections are
the guard's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.httpserve.guard import ConnectionGuard


class GuardedAppRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a guard (`runner.guard`)."""

    def __init__(self, app: web.Application, limits: ConnectionLimits | None = None, **kwargs: Any) -> None:
        limits = limits or ConnectionLimits()
        super().__init__(
            app,
            keepalive_timeout=limits.header_timeout_s,
            lingering_time=min(limits.body_timeout_s, 10.0),
            **kwargs,
        )
        self.guard = ConnectionGuard(limits)

    @property
    def server(self) -> Callable[[], asyncio.Protocol] | None:  # type: ignore[override]
        # Sites hand this protocol factory to `loop.create_server`; the runner shuts down its own server.
        inner = super().server
        return None if inner is None else self.guard.wrap(inner)
