"""Load the model, build the paged engine and its thread, and serve the API on a socket bound beforehand."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import uvicorn

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.configs.engine import EngineConfig, PagedEngineConfig
from swarmrl.configs.model import PromptSection
from swarmrl.devices import resolve_device
from swarmrl.httpserve import guarded_uvicorn_config, raise_open_file_limit
from swarmrl.inference import llama_layers
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.rundir import write_text_atomic
from swarmrl.serve.answer import Served
from swarmrl.serve.app import create_app
from swarmrl.serve.engine_loop import EngineLoop
from swarmrl.serve.errors import ServeError
from swarmrl.serve.grammar import Grammars

log = logging.getLogger(__name__)
# A position table this long or more is no limit worth checking against (the KV cache decides first).
_UNBOUNDED_POSITIONS = 1 << 20


def build_served(
    path: Path,
    prompt: PromptSection,
    *,
    engine: EngineConfig | None,
    names: tuple[str, ...],
    dtype: str,
    device: str,
    max_waiting: int,
    api_key: str | None,
) -> Served:
    """The model at `path` in a paged engine on `device`, driven by its own thread."""
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype, device=str(resolve_device(device)))
    if not llama_layers.supports(model):
        raise ServeError(f"{type(model).__name__} is not a Llama-family model, which the paged engine runs")
    # End of turn, EOS and the model's generation EOS list end a completion, as they end a worker's.
    stops = prompt_format(tokenizer, prompt).stop_token_ids
    config = engine if isinstance(engine, PagedEngineConfig) else PagedEngineConfig()
    paged = PagedEngine(model, config, eos_token_id=stops)
    parts = paged.runner.model.parts
    return Served(
        EngineLoop(paged, stops, max_waiting),
        tokenizer,
        prompt,
        names,
        parts.max_positions or _UNBOUNDED_POSITIONS,
        Grammars(tokenizer, parts.vocab_size, stops),
        api_key=api_key,
    )


def run_server(served: Served, sock: socket.socket, url_file: Path | None) -> None:
    """Blocks until interrupted; the URL goes to the log and to `url_file` once the socket listens."""
    raise_open_file_limit()
    config, guard = guarded_uvicorn_config(
        create_app(served),
        ConnectionLimits(),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    sock.listen(guard.backlog)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    if url_file is not None:
        write_text_atomic(url_file, url)
    log.info("serving %s at %s/v1", served.model_name, url)
    uvicorn.Server(config).run(sockets=[sock])
