"""The slow-client limits of one HTTP server (typed, documented, defaulted)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ConnectionLimits(BaseModel):
    """Read deadlines in the manner of Apache's mod_reqtimeout, and caps on open connections.

    A connection still sending its request head after `header_timeout_s` (counted from the connection opening
    or from the end of the previous response) is closed; so is one sending a request body for longer than
    `body_timeout_s` plus one second per `min_body_rate_bytes_s` bytes of body received so far. An address
    holding `max_per_address` open connections is refused more. Past `max_total` in all, the oldest connection
    that has not yet sent a complete request head (the half-sent sockets of a slowloris) is dropped for the
    newcomer; when there is none, the newcomer is refused.

    Long-lived responses (the dashboard's event streams) are a class of their own: at most
    `max_streams_per_address` from one address and `max_streams_total` in all, and a connection serving one
    counts against these alone, not against the caps above, so node and trainer requests always find a slot
    however many viewers watch. A stream asked for past its budget is refused with 503 (the dashboard polls).
    """

    model_config = ConfigDict(extra="forbid")

    header_timeout_s: float = Field(10.0, gt=0, description="seconds a client gets to send a request head")
    body_timeout_s: float = Field(30.0, gt=0, description="base seconds a client gets to send a request body")
    min_body_rate_bytes_s: float = Field(
        64 * 1024, gt=0, description="each this many body bytes received extend the body deadline by 1 s"
    )
    max_per_address: int = Field(128, ge=1, description="open connections one client address may hold")
    max_total: int = Field(
        1024,
        ge=1,
        description="open connections the server holds in all (lowered to the open-file limit minus 64)",
    )
    max_streams_per_address: int = Field(
        2, ge=0, description="long-lived streams (dashboard event streams) one client address may hold open"
    )
    max_streams_total: int = Field(32, ge=0, description="long-lived streams the server holds open in all")
