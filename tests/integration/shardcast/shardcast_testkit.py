"""Shared pieces of the shardcast integration tests: checkpoints on disk, servers in threads, a slow link."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path

from polling import wait_for

from swarmrl.configs.shardcast import OriginConfig, RelayConfig
from swarmrl.identity import Identity
from swarmrl.shardcast import Origin, Relay, ServerThread

TRAINER = Identity.from_seed(b"t" * 32)
SHARD = 64 * 1024


def write_checkpoint(root: Path, version: int, model_bytes: int = 1_000_000, seed: int = 0) -> Path:
    directory = root / f"step_{version}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.safetensors").write_bytes(
        os.urandom(model_bytes) if seed < 0 else _seeded(model_bytes, seed)
    )
    (directory / "config.json").write_text('{"hidden_size": 8}')
    (directory / "tokenizer").mkdir(exist_ok=True)
    (directory / "tokenizer" / "vocab.txt").write_text("a\nb\nc\n")
    return directory


def next_version(root: Path, version: int, size: int) -> Path:
    """Version `version`: the previous one with a few bytes changed, so its delta is small."""
    directory = write_checkpoint(root, version, size)
    model = bytearray((root / f"step_{version - 1}" / "model.safetensors").read_bytes())
    model[1000:1010] = bytes(range(version, version + 10))
    (directory / "model.safetensors").write_bytes(bytes(model))
    return directory


def _seeded(n: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


def start_origin(
    root: Path, shard_size: int = SHARD, delta: bool = False, header_timeout_s: float | None = None
) -> tuple[Origin, ServerThread]:
    """`header_timeout_s`: the server's own limit instead of the default (it also closes an idle keep-alive
    connection after that long)."""
    config = OriginConfig(shard_size=shard_size, delta=delta)
    if header_timeout_s is not None:
        config.connections = config.connections.model_copy(update={"header_timeout_s": header_timeout_s})
    origin = Origin(root, TRAINER, "test-run", config)
    return origin, origin.serve_in_thread()


def start_relay(
    upstreams: list[str], data_dir: Path, keep: int = 5, grace: float = 60.0
) -> tuple[Relay, ServerThread]:
    config = RelayConfig(
        upstreams=upstreams, data_dir=data_dir, keep_versions=keep, gc_grace_s=grace, long_poll_s=5
    )
    relay = Relay(config, TRAINER.node_id)
    return relay, relay.serve_in_thread()


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, interval: float = 0.02) -> None:
    wait_for(predicate, timeout, "the condition", interval)


def assert_same_tree(a: Path, b: Path) -> None:
    """The same checkpoint files (not SHARDCAST's own records), byte for byte."""
    files_a = sorted(
        p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file() and ".shardcast" not in p.parts
    )
    files_b = sorted(
        p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file() and ".shardcast" not in p.parts
    )
    assert files_a == files_b
    for name in files_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def origin_and_relay_holding_v1(tmp_path: Path, servers: list, model_bytes: int) -> tuple[Origin, Relay]:
    """An origin publishing deltas under tmp_path/ckpt, version 1 published, and a relay under tmp_path/relay
    that already holds it (both servers appended to `servers` for the fixture to stop)."""
    root = tmp_path / "ckpt"
    origin, origin_server = start_origin(root, delta=True)
    servers.append(origin_server)
    origin.publish(write_checkpoint(root, 1, model_bytes), 1)
    relay, relay_server = start_relay([origin_server.url], tmp_path / "relay")
    servers.append(relay_server)
    wait_until(lambda: relay_holds(relay, 1))
    return origin, relay


def relay_holds(relay: Relay, version: int) -> bool:
    entry = relay.store.get(version)
    return entry is not None and entry.complete


class SlowLink:
    """A TCP proxy on 127.0.0.1 that limits the downstream rate, to make transfers last long enough to
    interrupt, and may delay requests, to stand for a distant machine. `close()` drops every connection, like a
    machine going away."""

    def __init__(self, upstream_url: str, bytes_per_second: float, delay_s: float = 0.0) -> None:
        host_port = upstream_url.removeprefix("http://")
        self._host, port = host_port.split(":")
        self._port = int(port)
        self._rate = bytes_per_second
        self._delay_s = delay_s  # held before each request chunk goes upstream: a round trip this long
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.carried = 0  # bytes passed downstream so far: a transfer through the link is under way
        self.url = ""

    def start(self) -> SlowLink:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._carry(reader, writer)
        except asyncio.CancelledError:
            # Ends normally when close() cancels it: Python 3.11's start_server callback calls exception() on a
            # cancelled handler, which raises and logs a traceback after pytest has closed the log stream.
            return

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.close()
            return
        self._writers.update({writer, up_writer})

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, limited: bool) -> None:
            try:
                while data := await src.read(16384):
                    if not limited and self._delay_s:
                        await asyncio.sleep(self._delay_s)
                    dst.write(data)
                    await dst.drain()
                    if limited:
                        self.carried += len(data)
                        await asyncio.sleep(len(data) / self._rate)
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, False), pump(up_reader, writer, True))

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
