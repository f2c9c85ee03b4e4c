"""ASGI guard: JSON request bodies larger than a cap are refused with 413 before they fill memory.

Uploads are exempt here: their handler streams to disk under the slot's own declared-size cap.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    def __init__(self, app: ASGIApp, limit_bytes: int, exempt_prefix: str = "/v1/uploads/") -> None:
        self.app = app
        self.limit = limit_bytes
        self.exempt_prefix = exempt_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(self.exempt_prefix):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send, f"declared body of {int(declared)} bytes")
            return
        received = 0
        exceeded = False
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    exceeded = True
                    # Ends the body early; the app's answer to the truncated body is replaced below.
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if exceeded:
                return
            response_started = True
            await send(message)

        await self.app(scope, limited_receive, guarded_send)
        if exceeded and not response_started:
            await self._refuse(send, f"body over {received} bytes")

    async def _refuse(self, send: Send, what: str) -> None:
        body = json.dumps({"error": "too_large", "detail": f"{what}; the cap is {self.limit} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
