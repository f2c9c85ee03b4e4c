"""The coordinator boundary's exceptions: what the server answers and what the client raises."""

from __future__ import annotations


class ApiError(Exception):
    """Raised inside the service; rendered as `{"error": kind, "detail": detail}` with `status`."""

    status: int = 400
    kind: str = "bad_request"

    def __init__(self, detail: str, *, kind: str | None = None, status: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if kind is not None:
            self.kind = kind
        if status is not None:
            self.status = status


class AuthError(ApiError):
    """The request is not signed by who it claims, is stale or replayed (401)."""

    status = 401
    kind = "unauthorized"


class ForbiddenError(ApiError):
    """The signer is known but may not do this: banned, wrong role, not a member (403)."""

    status = 403
    kind = "forbidden"


class NotFoundError(ApiError):
    status = 404
    kind = "not_found"


class ConflictError(ApiError):
    """The request contradicts recorded state: duplicate, already decided, out of order (409)."""

    status = 409
    kind = "conflict"


class RateLimitError(ApiError):
    """Too many requests from one node (429); `retry_after_s` tells it when to ask again (Retry-After)."""

    status = 429
    kind = "rate_limited"

    def __init__(self, detail: str, *, kind: str | None = None, retry_after_s: float = 1.0) -> None:
        super().__init__(detail, kind=kind)
        self.retry_after_s = retry_after_s


class SchemaVersionError(Exception):
    """The database was written by a newer swarmrl than this one; refusing to touch it."""


class CoordinatorError(Exception):
    """Raised by the coordinator clients: the server refused (status, kind) or could not be reached (status
    0); `retry_after_s` is what a 429/503 answer asked the caller to wait, when it said."""

    def __init__(self, status: int, kind: str, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"coordinator answered {status} {kind}: {detail}")
        self.status = status
        self.kind = kind
        self.detail = detail
        self.retry_after_s = retry_after_s
