"""The HTTP read side of origin and relay: versions, long-poll, manifests, availability, ranges, metrics.

Routes (all GET):
  /versions                         {"versions": [...], "latest": k | null}
  /latest?after=K&wait=S            long-poll: answers as soon as a version > K exists, or after S seconds;
                                    &manifest=1 adds that version's signed manifest and the shards held
                                    of it (two round trips less: the manifest's and the availability's)
  /v/{version}/manifest             the signed manifest bytes, exactly as the trainer wrote them
  /v/{version}/availability         {"version": k, "shards": [...]}: verified, or arriving (a relay, see below);
                                    ?known=N&wait=S long-polls
  /v/{version}/data/{path}          file bytes; Range requests are honoured and sent with sendfile;
                                    ?wait=S holds a request for a version not held yet until it is (parked)
  /metrics                          Prometheus text format
A range is served when every shard it touches is held, or (a relay) when it lies in one shard whose request
upstream is in flight: then its bytes go out as they land and the last one only once the shard verified; the
response is cut short otherwise (`swarmrl.shardcast.streaming`). No range is ever completed unverified.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import Metric

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.errors import listen_error
from swarmrl.httpserve import ConnectionGuard, GuardedAppRunner, Notifier
from swarmrl.shardcast.streaming import InFlight

log = logging.getLogger(__name__)
MAX_LONG_POLL_S = 60.0
STREAM_CHUNK = 256 * 1024
STREAM_STALL_S = 30.0  # no new byte upstream for this long: the response is cut (the client asks elsewhere)


class VersionStore(Protocol):
    """What a server needs to know about the versions it holds."""

    def versions(self) -> list[int]: ...

    def manifest_bytes(self, version: int) -> bytes | None: ...

    def available_shards(self, version: int) -> list[int] | None: ...

    def servable_path(self, version: int, path: str, start: int, stop: int) -> Path | None:
        """The file to read bytes [start, stop) of `path` from, or None if not (yet) held."""

    def file_size(self, version: int, path: str) -> int | None: ...

    def streamable(self, version: int, path: str, start: int, stop: int) -> tuple[Path, InFlight] | None:
        """The file and the upstream request of the one shard holding [start, stop) while it arrives (a relay);
        None where nothing is in flight."""

    def touch(self, version: int, reading: int) -> None:
        """A read of `version` starts (+1) or ends (-1); garbage collection spares versions being read."""


class ServerMetrics:
    """Prometheus metrics of one server, in its own registry so several servers can share a process."""

    def __init__(self, role: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "shardcast_requests", "HTTP requests", ["role", "endpoint", "code"], registry=self.registry
        )
        self.bytes_served = Counter(
            "shardcast_bytes_served", "payload bytes sent", ["role"], registry=self.registry
        )
        self.versions_held = Gauge(
            "shardcast_versions_held", "versions served", ["role"], registry=self.registry
        )
        self.latest_version = Gauge(
            "shardcast_latest_version", "newest version", ["role"], registry=self.registry
        )
        self.shards_verified = Counter(
            "shardcast_shards_verified", "shards mirrored and verified", ["role"], registry=self.registry
        )
        self.shards_rejected = Counter(
            "shardcast_shards_rejected",
            "shards that failed their signed hash",
            ["role"],
            registry=self.registry,
        )
        self.manifests_rejected = Counter(
            "shardcast_manifests_rejected", "forged or replayed manifests", ["role"], registry=self.registry
        )
        self.versions_collected = Counter(
            "shardcast_versions_collected", "versions garbage-collected", ["role"], registry=self.registry
        )
        self.role = role
        self.connections: ConnectionGuard | None = None  # the guard of the running server
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        """The connection guard's figures (this object is also a collector of its own registry)."""
        if self.connections is not None:
            yield from self.connections.collect("shardcast")


def build_app(store: VersionStore, notifier: Notifier, metrics: ServerMetrics) -> web.Application:
    routes = ReadRoutes(store, notifier, metrics)
    app = web.Application()
    app.add_routes(
        [
            web.get("/versions", routes.versions),
            web.get("/latest", routes.latest),
            web.get("/v/{version}/manifest", routes.manifest),
            web.get("/v/{version}/availability", routes.availability),
            web.get("/v/{version}/data/{path:.+}", routes.data),
            web.get("/metrics", routes.prometheus),
        ]
    )

    async def bind_notifier(app: web.Application) -> None:
        notifier.bind(asyncio.get_running_loop())

    app.on_startup.append(bind_notifier)
    return app


class ReadRoutes:
    """The handlers of the routes above, over one store; each counts its answers by endpoint and code."""

    def __init__(self, store: VersionStore, notifier: Notifier, metrics: ServerMetrics) -> None:
        self.store, self.notifier, self.metrics = store, notifier, metrics

    def count(self, endpoint: str, code: int) -> None:
        self.metrics.requests.labels(self.metrics.role, endpoint, str(code)).inc()

    def refresh_gauges(self) -> list[int]:
        versions = self.store.versions()
        self.metrics.versions_held.labels(self.metrics.role).set(len(versions))
        if versions:
            self.metrics.latest_version.labels(self.metrics.role).set(versions[-1])
        return versions

    async def versions(self, request: web.Request) -> web.Response:
        found = self.refresh_gauges()
        self.count("versions", 200)
        return web.json_response({"versions": found, "latest": found[-1] if found else None})

    async def latest(self, request: web.Request) -> web.Response:
        try:
            after = int(request.query.get("after", "-1"))
        except ValueError:
            self.count("latest", 400)
            raise web.HTTPBadRequest(text="after must be an integer") from None
        async for last in self.notifier.looks(self._wait_arg(request, "latest")):
            found = self.refresh_gauges()
            newest = found[-1] if found else None
            if (newest is not None and newest > after) or last:
                self.count("latest", 200)
                answer: dict = {"latest": newest}
                if request.query.get("manifest") == "1" and newest is not None:
                    raw = self.store.manifest_bytes(newest)
                    if raw is not None:  # collected meanwhile: the caller asks for it
                        answer["manifest"] = raw.decode("utf-8")
                        answer["shards"] = self.store.available_shards(newest)
                return web.json_response(answer)
        raise AssertionError("a long poll's last look answers")

    def _wait_arg(self, request: web.Request, endpoint: str) -> float:
        """`?wait=S`: how long a long-poll may hold the answer, in [0, MAX_LONG_POLL_S]."""
        try:
            wait = float(request.query.get("wait", "0"))
        except ValueError:
            wait = math.nan
        if math.isnan(wait):
            self.count(endpoint, 400)
            raise web.HTTPBadRequest(text="wait must be a number of seconds")
        return min(max(wait, 0.0), MAX_LONG_POLL_S)

    async def manifest(self, request: web.Request) -> web.Response:
        raw = self.store.manifest_bytes(_version_arg(request))
        if raw is None:
            self.count("manifest", 404)
            raise web.HTTPNotFound(text="no such version")
        self.count("manifest", 200)
        return web.Response(body=raw, content_type="application/json")

    async def availability(self, request: web.Request) -> web.Response:
        """`?known=N&wait=S`: hold the answer until more than N shards are held (a relay still mirroring)."""
        version = _version_arg(request)
        try:
            known = int(request.query.get("known", "-1"))
        except ValueError:
            self.count("availability", 400)
            raise web.HTTPBadRequest(text="known must be an integer") from None
        async for last in self.notifier.looks(self._wait_arg(request, "availability")):
            shards = self.store.available_shards(version)
            if shards is None:
                self.count("availability", 404)
                raise web.HTTPNotFound(text="no such version")
            if len(shards) > known or last:
                self.count("availability", 200)
                return web.json_response({"version": version, "shards": shards})
        raise AssertionError("a long poll's last look answers")

    async def data(self, request: web.Request) -> web.StreamResponse:
        version = _version_arg(request)
        path = request.match_info["path"]
        async for last in self.notifier.looks(self._wait_arg(request, "data")):
            if last or self.store.manifest_bytes(version) is not None:
                break
        size = self.store.file_size(version, path)
        if size is None:
            self.count("data", 404)
            raise web.HTTPNotFound(text="no such file in this version")
        start, stop = self._satisfiable_range(request, size)
        local = self.store.servable_path(version, path, start, stop)
        if local is None:
            arriving = self.store.streamable(version, path, start, stop)
            if arriving is None:
                self.count("data", 503)
                raise web.HTTPServiceUnavailable(text="range not held (yet)", headers={"Retry-After": "1"})
            return await self._pass_on(request, version, *arriving, start, stop, size)
        return _TrackedFileResponse(
            local, lambda delta: self.store.touch(version, delta), self.count, self.metrics, stop - start
        )

    async def _pass_on(
        self,
        request: web.Request,
        version: int,
        local: Path,
        flight: InFlight,
        start: int,
        stop: int,
        size: int,
    ) -> web.StreamResponse:
        """Send [start, stop) of a shard as its bytes land; the last byte once the request that wrote them
        verified. Cut short (the connection aborted) if that request fails or stalls."""
        response = web.StreamResponse(
            status=206,
            headers={
                "Content-Range": f"bytes {start}-{stop - 1}/{size}",
                "Content-Type": "application/octet-stream",
            },
        )
        response.content_length = stop - start
        self.store.touch(version, +1)
        sent = start
        try:
            await response.prepare(request)
            with open(local, "rb") as source, flight.watch() as changed:
                while sent < stop:
                    changed.clear()
                    verdict = flight.verified  # read before the bytes: True means every byte is in place
                    if verdict is False:
                        break
                    landed = flight.shard.offset + flight.landed()
                    limit = stop if verdict else min(landed, stop - 1)
                    if limit <= sent:
                        try:
                            await asyncio.wait_for(changed.wait(), STREAM_STALL_S)
                        except TimeoutError:
                            break
                        continue
                    chunk = os.pread(source.fileno(), min(limit - sent, STREAM_CHUNK), sent)
                    if not chunk:  # the file shrank under us: nothing sound to send
                        break
                    await response.write(chunk)
                    sent += len(chunk)
        except ConnectionError:
            # The client hung up (a hedge it lost, a source it cut below its floor): not an error here.
            log.debug(
                "version %d: %s from %d: the client left after %d bytes",
                version,
                local.name,
                start,
                sent - start,
            )
            return response
        finally:
            self.store.touch(version, -1)
            self.metrics.bytes_served.labels(self.metrics.role).inc(sent - start)
        self.count("data", 206)
        if sent < stop:
            log.info(
                "version %d: %s bytes %d-%d cut short: its request upstream failed or stalled",
                version,
                local.name,
                start,
                stop - 1,
            )
            if request.transport is not None:
                request.transport.abort()  # a short body: the client retries, it never holds a wrong shard
            return response
        await response.write_eof()
        return response

    def _satisfiable_range(self, request: web.Request, size: int) -> tuple[int, int]:
        """[start, stop) of the request's Range in a file of `size` bytes; 416 when it cannot be served."""
        try:
            requested = request.http_range
        except ValueError:
            requested = None
        if requested is not None and not _is_empty_suffix(request.headers.get("Range")):
            start, stop = _absolute_range(requested, size)
            if start < stop or size == 0:
                return start, stop
        self.count("data", 416)
        raise web.HTTPRequestRangeNotSatisfiable(headers={"Content-Range": f"bytes */{size}"})

    async def prometheus(self, request: web.Request) -> web.Response:
        self.refresh_gauges()
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _version_arg(request: web.Request) -> int:
    try:
        return int(request.match_info["version"])
    except ValueError:
        raise web.HTTPBadRequest(text="version must be an integer") from None


class _TrackedFileResponse(web.FileResponse):
    """A sendfile response that tells the store while it is being read (so GC spares the version)."""

    def __init__(
        self,
        path: Path,
        touch: Callable[[int], None],
        count: Callable[[str, int], None],
        metrics: ServerMetrics,
        nbytes: int,
    ) -> None:
        super().__init__(path, chunk_size=1024 * 1024)
        self._touch, self._count, self._metrics, self._nbytes = touch, count, metrics, nbytes

    async def prepare(self, request: web.BaseRequest):
        if self.prepared:
            return await super().prepare(request)
        self._touch(+1)
        try:
            writer = await super().prepare(request)
        finally:
            self._touch(-1)
        self._count("data", self.status)
        if self.status in (200, 206):
            self._metrics.bytes_served.labels(self._metrics.role).inc(self._nbytes)
        return writer


_EMPTY_SUFFIX = re.compile(r"bytes=\s*-\s*0+\s*", re.ASCII | re.IGNORECASE)


def _is_empty_suffix(header: str | None) -> bool:
    """`bytes=-0` asks for the last zero bytes: unsatisfiable (RFC 9110 §14.1.1). aiohttp reads the suffix
    length 0 as offset 0 and would send the whole file."""
    return header is not None and _EMPTY_SUFFIX.fullmatch(header) is not None


def _absolute_range(requested: slice, size: int) -> tuple[int, int]:
    """[start, stop) in file coordinates from aiohttp's parsed Range (which may be a suffix or open-ended)."""
    start, stop = requested.start, requested.stop
    if start is None:
        return 0, size
    if start < 0:  # suffix range "-n"
        return max(size + start, 0), size
    return start, size if stop is None else min(stop, size)


class ServerThread:
    """Runs an aiohttp application on its own event loop in a daemon thread (for trainers and tests)."""

    def __init__(
        self,
        app_factory: Callable[[], web.Application],
        host: str = "127.0.0.1",
        port: int = 0,
        limits: ConnectionLimits | None = None,
        metrics: ServerMetrics | None = None,
        what: str = "shardcast server",
    ) -> None:
        self._app_factory = app_factory
        self._what = what
        self._host, self._port = host, port
        self._limits, self._metrics = limits, metrics
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="shardcast-server", daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def start(self) -> ServerThread:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self.loop)
        self.url = future.result(timeout=30)
        return self

    async def _start(self) -> str:
        self._runner, url = await start_site(
            self._app_factory(), self._host, self._port, self._limits, self._metrics, self._what
        )
        return url

    def stop(self) -> None:
        if self._runner is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(timeout=30)
            self._runner = None
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()

    async def _shutdown(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def start_site(
    app: web.Application,
    host: str,
    port: int,
    limits: ConnectionLimits | None = None,
    metrics: ServerMetrics | None = None,
    what: str = "shardcast server",
) -> tuple[web.AppRunner, str]:
    """Start serving `app` behind the slow-client guard; return the runner (call `cleanup()` to stop) and the
    base URL it listens on. `metrics` then also report the guard's figures. A port another process holds is
    `AddressInUse` naming host:port, after the runner (and what the app opened) is cleaned up."""
    runner = GuardedAppRunner(app, limits, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    if metrics is not None:
        metrics.connections = runner.guard
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=runner.guard.backlog)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise listen_error(exc, host, port, what) from exc
    bound_port = runner.addresses[0][1]  # the OS's pick when port == 0
    return runner, served_url(host, bound_port)


def served_url(host: str, port: int) -> str:
    """The base URL of a server bound to `host`:`port`. A wildcard host is no address a peer can open, so this
    machine's hostname stands in for it (set an advertise URL where peers know the machine by another name)."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
