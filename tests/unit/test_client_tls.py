"""Every HTTP client of a process shares one TLS context: building one reads the whole CA bundle, about 25 ms of
CPU, and a process that talks as a hundred identities made a hundred of them."""

from __future__ import annotations

import asyncio
import ssl

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.coordinator.transport import SignedTransport
from swarmrl.identity import Identity
from swarmrl.shardcast.connections import http_client
from swarmrl.tls import client_tls


def test_the_shared_context_verifies_servers() -> None:
    context = client_tls()
    assert context is client_tls()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0


def test_clients_as_many_identities_read_the_ca_bundle_at_most_once(monkeypatch) -> None:
    reads = []
    real = ssl.SSLContext.load_verify_locations

    def counting(self, *args, **kwargs):
        reads.append(args or kwargs)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    client_tls.cache_clear()
    transports = [
        SignedTransport("https://coordinator.invalid", Identity.from_seed(bytes([i]) * 32)) for i in range(20)
    ]
    shards = http_client(ClientConfig())
    try:
        assert len(reads) == 1
    finally:
        for transport in transports:
            transport.close()
        asyncio.run(shards.aclose())
