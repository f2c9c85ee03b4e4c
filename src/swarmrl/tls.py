"""The TLS settings every HTTP client of a process shares.

Building them reads the whole CA bundle (about 25 ms of CPU each time), and httpx builds them anew for every
client it makes unless it is handed a context; a node talks as several identities and reconnects, so the
process builds them once. The trust store is httpx's own default: `SSL_CERT_FILE` / `SSL_CERT_DIR` when set,
else certifi's bundle.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_tls() -> ssl.SSLContext:
    """The process's one client TLS context (SSLContext is safe to share across threads and clients)."""
    return httpx.create_ssl_context()
