"""`swarmrl serve` driven by the `openai` package as a user's harness drives it: completions and chat, streamed
and whole, n, seed, logprobs, stop strings, the chat template; what it refuses, it refuses as OpenAI does (400)."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import openai
import pytest
import torch
from polling import wait_for

from swarmrl.configs import load_config
from swarmrl.configs.model import PromptSection, TinyModelSpec
from swarmrl.inference.engine import GenerationRequest, SamplingParams
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.launch.processes import ProcessGroup
from swarmrl.models import (
    build_tiny_model,
    load_model,
    load_tokenizer,
    save_pretrained_atomic,
    train_tokenizer,
)
from swarmrl.models.prompting import apply_chat_template, prompt_format
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE
from swarmrl.rollouts.assignment import sample_seed
from swarmrl.serve.cli import served_checkpoint
from swarmrl.serve.errors import ServeError

pytestmark = pytest.mark.timeout(300)

TEXTS = [f"The {w} of {n} is a word we say." for w in ("tree", "stone", "river", "cloud") for n in range(40)]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a tree."}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = train_tokenizer(TEXTS, vocab_size=300, chat_template=CHATML_THINK_TEMPLATE)
    model = build_tiny_model(
        TinyModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2), tokenizer
    )
    path = tmp_path_factory.mktemp("served") / "step_3"
    save_pretrained_atomic(model, tokenizer, path)
    return path


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """`swarmrl serve` as its own process (stopped by PID), on a port the OS picks."""
    work = tmp_path_factory.mktemp("serve")
    url_file, group = work / "url", ProcessGroup(work)
    args = ["serve", "--model", str(model_dir), "--port", "0", "--url-file", str(url_file), "--device", "cpu"]
    process = group.start("serve", args)

    def up() -> bool:
        assert process.popen.poll() is None, process.tail()
        return url_file.exists() and httpx.get(url_file.read_text() + "/health").status_code == 200

    try:
        wait_for(up, 120, "swarmrl serve to answer")
        yield url_file.read_text()
    finally:
        group.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def test_it_lists_the_model_it_serves(client):
    assert [m.id for m in client.models.list().data] == ["step_3"]


def test_completions_are_the_engines_seeded_samples(client, model_dir):
    out = client.completions.create(
        model="step_3", prompt="The tree of", max_tokens=8, n=2, seed=7, logprobs=1
    )
    assert [c.index for c in out.choices] == [0, 1]
    tokenizer = load_tokenizer(model_dir)
    prompt_ids = tokenizer("The tree of").input_ids
    stops = prompt_format(tokenizer, PromptSection()).stop_token_ids
    engine = PagedEngine(load_model(model_dir), eos_token_id=stops)
    params = SamplingParams(max_new_tokens=8, stop_token_ids=stops)
    expected = engine.generate(
        [GenerationRequest(prompt_ids, sample_seed(7, 0, j)) for j in range(2)], params
    )
    for choice, generation in zip(out.choices, expected, strict=True):
        assert choice.text == tokenizer.decode(generation.completion_ids, skip_special_tokens=True)
        sampled = generation.logprobs[: len(choice.logprobs.token_logprobs)]
        assert choice.logprobs.token_logprobs == pytest.approx(sampled, abs=1e-5)
        assert choice.finish_reason == ("stop" if generation.finish_reason == "eos" else "length")
    assert out.usage.prompt_tokens == len(prompt_ids)
    assert out.usage.completion_tokens == sum(len(g.completion_ids) for g in expected)
    again = client.completions.create(model="step_3", prompt="The tree of", max_tokens=8, n=2, seed=7)
    assert [c.text for c in again.choices] == [c.text for c in out.choices]


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(client):
    free = client.completions.create(model="m", prompt="The river", max_tokens=24, seed=3).choices[0].text
    words = re.findall(r"[A-Za-z]{2,}", free[1:])
    assert words, free
    stop = words[0]
    cut = free[: free.index(stop, 1)]
    whole = client.completions.create(model="m", prompt="The river", max_tokens=24, seed=3, stop=[stop])
    assert (whole.choices[0].text, whole.choices[0].finish_reason) == (cut, "stop")
    stream = client.completions.create(
        model="m", prompt="The river", max_tokens=24, seed=3, stop=stop, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == cut
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_goes_through_the_template_and_streams_what_it_would_answer(client, model_dir):
    tokenizer = load_tokenizer(model_dir)
    whole = client.chat.completions.create(
        model="m", messages=CHAT, max_tokens=12, seed=11, n=2, logprobs=True
    )
    template = apply_chat_template(tokenizer, CHAT, PromptSection(), tokenize=True)
    assert whole.usage.prompt_tokens == len(template)
    assert all(c.message.role == "assistant" and c.logprobs.content for c in whole.choices)
    stream = client.chat.completions.create(
        model="m",
        messages=CHAT,
        max_tokens=12,
        seed=11,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finish, usage = ["", ""], [None, None], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finish[choice.index] = choice.finish_reason or finish[choice.index]
    assert texts == [c.message.content for c in whole.choices]
    assert (
        finish == [c.finish_reason for c in whole.choices] and usage.total_tokens == whole.usage.total_tokens
    )


def test_greedy_decoding_needs_no_seed(client):
    answers = {
        client.completions.create(model="m", prompt="A stone", max_tokens=6, temperature=0).choices[0].text
        for _ in range(2)
    }
    assert len(answers) == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (dict(prompt="x", max_tokens=100_000), "exceed the model's context"),
        (dict(prompt="x", n=17), "n"),
        (dict(prompt="x", logit_bias={"5": 1.0}), "logit_bias is not supported"),
        (dict(prompt="x", stop=["a", "b", "c", "d", "e"]), "stop takes at most 4"),
        (dict(prompt=[999_999]), "prompt token ids must lie in"),
    ],
)
def test_what_it_cannot_do_is_a_400_naming_it(client, call, message):
    with pytest.raises(openai.BadRequestError, match=message):
        client.completions.create(model="m", **call)


def test_chat_refuses_tools(client):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="tools are not supported"):
        client.chat.completions.create(model="m", messages=CHAT, tools=[tool])


@pytest.mark.slow
def test_a_run_config_serves_its_newest_checkpoint(tmp_path, model_dir):
    config = load_config(None, [f"run.root='{tmp_path}'", "run.name='r'"])
    checkpoints = tmp_path / "r" / "checkpoints"
    with pytest.raises(ServeError, match="no checkpoint"):
        served_checkpoint(config, None, None)
    for step in (0, 2):
        (checkpoints / f"step_{step}").mkdir(parents=True)
        (checkpoints / f"step_{step}" / "config.json").write_text("{}")
    assert served_checkpoint(config, None, None) == checkpoints / "step_2"
    assert served_checkpoint(config, None, 0) == checkpoints / "step_0"
    assert served_checkpoint(None, model_dir, None) == model_dir
    result = subprocess.run(
        [sys.executable, "-m", "swarmrl.cli", "serve", "--model", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        result.returncode == 2
        and result.stderr.strip().count("\n") == 0
        and "no config.json" in result.stderr
    )
