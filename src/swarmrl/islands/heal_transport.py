"""torchft's HTTP checkpoint transport with a receiving side that trusts the sending peer with nothing.

torchft's `HTTPTransport` loads the state it heals from with the full pickle loader (`weights_only=False`),
so the peer that serves it runs any code it likes in the healing island, and it reads the whole response,
however large, from whatever URL the peer named. This subclass serves exactly as torchft does and receives
with `weights_only=True` (tensors, numbers, strings and containers only: what `IslandMerger.state_dict`
and torchft's own step counters hold), from http URLs only, and at most `max_bytes`. It offers its own state
at `host` (torchft names the machine's hostname, which on a machine of several addresses may not be the one
peers reach).
"""

from __future__ import annotations

import io
import urllib.parse
from datetime import timedelta

import httpx

# The reader of torchft's wire format (torchft writes it with the matching `_streaming_save`).
from torch.distributed._serialization import _streaming_load
from torchft.checkpointing import HTTPTransport

from swarmrl.diloco.errors import DiLoCoStateError


class WeightsOnlyHTTPTransport(HTTPTransport):
    def __init__(self, timeout: timedelta, host: str = "127.0.0.1", max_bytes: int = 1 << 30) -> None:
        super().__init__(timeout=timeout, num_chunks=0)
        self.host = host
        self.max_bytes = max_bytes  # set to the island's own state bound once its merger exists

    def metadata(self) -> str:
        return f"http://{self.host}:{self._server.socket.getsockname()[1]}/checkpoint/"

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> object:
        url = f"{metadata}{step}/full"
        if urllib.parse.urlsplit(url).scheme != "http":
            raise DiLoCoStateError(f"a peer offers its state at {url[:200]!r}, not an http URL")
        data = self._read_at_most(url, timeout)
        # UnpicklingError for anything but plain data: the peer's state never runs code here.
        return _streaming_load(io.BytesIO(data), weights_only=True)

    def _read_at_most(self, url: str, timeout: timedelta) -> bytes:
        """The body of `url` as sent (never decompressed: that could expand without limit), refused once it
        passes `max_bytes`; the peer is reached directly, not through a proxy named in the environment."""
        parts, total = [], 0
        with httpx.stream(
            "GET",
            url,
            headers={"Accept-Encoding": "identity"},
            timeout=timeout.total_seconds(),
            trust_env=False,
        ) as response:
            if response.status_code != 200:
                raise DiLoCoStateError(
                    f"a peer answered HTTP {response.status_code} when asked for its state"
                )
            for chunk in response.iter_raw():
                total += len(chunk)
                if total > self.max_bytes:
                    raise DiLoCoStateError(f"a peer's state is over {self.max_bytes} bytes")
                parts.append(chunk)
        return b"".join(parts)
