"""A node's HTTP connections to its sources (origin, relays, upstreams): httpx on the event loop for the small
answers (versions, long polls, shard lists, manifests), as for every other request a node makes; urllib3 on
fetch threads for shard bytes (`range_pool.py` says why). Both pool their connections and keep them alive from
one request, and one version, to the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.shardcast.range_pool import RangePool
from swarmrl.tls import client_tls

# Sources are untrusted: their answers are read as sent (a compressed body could expand without limit), and
# both paths reach them directly, never through a proxy named in the environment.
_HEADERS = {"Accept-Encoding": "identity"}


def http_client(config: ClientConfig) -> httpx.AsyncClient:
    """httpx for the control requests (versions, long polls, shard lists, manifests): enough connections for a
    long poll and a shard-list poll per source beside the manifest races, no redirects followed."""
    return httpx.AsyncClient(
        headers=_HEADERS,
        timeout=httpx.Timeout(config.request_timeout_s, connect=config.connect_timeout_s),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=4 * config.concurrency),
        follow_redirects=False,
        trust_env=False,
        verify=client_tls(),
    )


@dataclass
class Connections:
    """`http`: the small requests, on the event loop; `shards`: the shard bytes, on fetch threads."""

    http: httpx.AsyncClient
    shards: RangePool

    @classmethod
    def open(cls, config: ClientConfig) -> Connections:
        return cls(http_client(config), RangePool(config.connect_timeout_s, config.request_timeout_s))

    async def aclose(self) -> None:
        await self.http.aclose()
        self.shards.close()
