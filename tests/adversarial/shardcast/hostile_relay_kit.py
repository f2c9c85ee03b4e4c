"""A hostile relay: a real HTTP server on 127.0.0.1 speaking the shardcast protocol with the genuine files and
manifests of published versions, altered in the ways a liar would.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from swarmrl.configs.shardcast import ClientConfig
from swarmrl.identity import Identity
from swarmrl.shardcast.manifest import SignedManifest

TRAINER = Identity.from_seed(b"t" * 32)
SHARD = 64 * 1024
QUICK = ClientConfig(
    max_attempts_per_shard=4,
    stall_timeout_s=3,
    backoff_base_s=0.05,
    backoff_max_s=0.3,
    connect_timeout_s=1,
    seed=0,
)
HUGE = 1_000_000_000


@dataclass
class Lies:
    """How the relay lies. Defaults: an honest relay."""

    announce: int | None = None  # a version announced on /versions and /latest that it does not hold
    manifest_delay_s: float = 0.0  # sleep before answering any manifest request
    corrupt_shards: set[int] = field(default_factory=set)  # model byte-shards with one byte flipped
    oversize: bool = False  # data answers carry 100 kB more than asked
    trickle_bytes_per_s: float | None = None  # data dribbles out at this rate, never silent for long
    silent_data: bool = False  # data requests are accepted and never answered
    enclosed: bytes | None = None  # what /latest?manifest=1 encloses (default: the latest version's manifest)
    holds_nothing: bool = False  # data answers are 404 and availability lists no shard, whatever it announced
    requests: list[str] = field(default_factory=list)  # every path asked, for assertions


def make_checkpoint(root: Path, version: int, size: int = 600_000) -> Path:
    directory = root / f"step_{version}"
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(random.Random(version).randbytes(size))
    (directory / "config.json").write_text("{}")
    return directory


def hostile_app(directory: Path, manifests: dict[int, bytes], lies: Lies | None = None) -> web.Application:
    """Serves `manifests[v]` for version v from the files in `directory`, claims every shard (on /availability
    and in its long-poll answer), and lies."""
    lies = lies or Lies()

    @web.middleware
    async def record(request: web.Request, handler):
        lies.requests.append(request.path)
        return await handler(request)

    def every_shard(raw: bytes) -> list[int]:
        return [s.index for s in SignedManifest.model_validate_json(raw).manifest.all_shards]

    def held(raw: bytes) -> list[int]:
        return [] if lies.holds_nothing else every_shard(raw)

    def announced() -> list[int]:
        return sorted(set(manifests) | ({lies.announce} if lies.announce is not None else set()))

    async def manifest(request: web.Request) -> web.Response:
        if lies.manifest_delay_s:
            await asyncio.sleep(lies.manifest_delay_s)
        raw = manifests.get(int(request.match_info["version"]))
        if raw is None:
            raise web.HTTPNotFound()
        return web.Response(body=raw, content_type="application/json")

    async def availability(request: web.Request) -> web.Response:
        raw = manifests.get(int(request.match_info["version"]))
        if raw is None:
            raise web.HTTPNotFound()
        return web.json_response({"version": int(request.match_info["version"]), "shards": held(raw)})

    async def data(request: web.Request) -> web.StreamResponse:
        if lies.holds_nothing:
            raise web.HTTPNotFound()
        content = (directory / request.match_info["path"]).read_bytes()
        start = request.http_range.start or 0
        stop = request.http_range.stop or len(content)
        if lies.silent_data:
            await asyncio.sleep(3600)
        if lies.trickle_bytes_per_s is not None:
            response = web.StreamResponse(
                status=206, headers={"Content-Range": f"bytes {start}-{stop - 1}/{len(content)}"}
            )
            response.content_length = stop - start
            await response.prepare(request)
            step = max(1, int(lies.trickle_bytes_per_s / 20))
            for position in range(start, stop, step):
                await response.write(content[position : min(position + step, stop)])
                await asyncio.sleep(step / lies.trickle_bytes_per_s)
            return response
        if lies.oversize:
            return web.Response(body=content + b"x" * 100_000, status=200)
        body = bytearray(content[start:stop])
        if request.match_info["path"] == "model.safetensors" and start // SHARD in lies.corrupt_shards:
            body[len(body) // 2] ^= 0xFF
        return web.Response(
            body=bytes(body),
            status=206,
            headers={"Content-Range": f"bytes {start}-{stop - 1}/{len(content)}"},
        )

    async def versions(request: web.Request) -> web.Response:
        found = announced()
        return web.json_response({"versions": found, "latest": found[-1] if found else None})

    async def latest(request: web.Request) -> web.Response:
        found = announced()
        answer: dict = {"latest": found[-1] if found else None}
        enclosed = lies.enclosed if lies.enclosed is not None else manifests.get(answer["latest"])
        if request.query.get("manifest") == "1" and enclosed is not None:
            answer["manifest"] = enclosed.decode("utf-8")
            answer["shards"] = every_shard(enclosed)  # claimed even when it holds nothing: the lie under test
        return web.json_response(answer)

    app = web.Application(middlewares=[record])
    app.add_routes(
        [
            web.get("/versions", versions),
            web.get("/latest", latest),
            web.get("/v/{version}/manifest", manifest),
            web.get("/v/{version}/availability", availability),
            web.get("/v/{version}/data/{path:.+}", data),
        ]
    )
    return app
