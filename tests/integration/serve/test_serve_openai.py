"""`swarmrl serve` driven by the `openai` package as a user's harness drives it: models list and retrieve,
completions and chat, streamed and whole, n, seed, logprobs and top_logprobs, stop strings, response_format,
vLLM's sampling extensions, the chat template, the API key; what it refuses, it refuses as OpenAI does (400,
401, 404). One server for the module."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
from polling import wait_for
from prometheus_client.parser import text_string_to_metric_families

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

# `openai` is imported by the fixture and the tests that use it: at module level every test worker paid its
# import (~1 s) while collecting, whether or not it ran any of these tests.

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


API_KEY = "sk-test-key"
NAMES = ["step_3", "tiny-alias"]


@pytest.fixture(scope="module")
def serve_process(model_dir, tmp_path_factory):
    """`swarmrl serve` as its own process (stopped by PID), on a port the OS picks, its key from the env."""
    work = tmp_path_factory.mktemp("serve")
    url_file, group = work / "url", ProcessGroup(work)
    args = ["serve", "--model", str(model_dir), "--port", "0", "--url-file", str(url_file), "--device", "cpu"]
    args += [part for name in NAMES for part in ("--served-model-name", name)]
    process = group.start("serve", args, env={"SWARMRL_API_KEY": API_KEY})

    def up() -> bool:
        assert process.popen.poll() is None, process.tail()
        return url_file.exists() and httpx.get(url_file.read_text() + "/health").status_code == 200

    try:
        wait_for(up, 120, "swarmrl serve to answer")
        yield url_file.read_text(), process
    finally:
        group.stop()


@pytest.fixture(scope="module")
def server(serve_process):
    return serve_process[0]


@pytest.fixture(scope="module")
def client(server):
    import openai

    with openai.OpenAI(base_url=f"{server}/v1", api_key=API_KEY, max_retries=0, timeout=60) as c:
        yield c


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
    free = (
        client.completions.create(model="step_3", prompt="The river", max_tokens=24, seed=3).choices[0].text
    )
    words = re.findall(r"[A-Za-z]{2,}", free[1:])
    assert words, free
    stop = words[0]
    cut = free[: free.index(stop, 1)]
    whole = client.completions.create(model="step_3", prompt="The river", max_tokens=24, seed=3, stop=[stop])
    assert (whole.choices[0].text, whole.choices[0].finish_reason) == (cut, "stop")
    stream = client.completions.create(
        model="step_3", prompt="The river", max_tokens=24, seed=3, stop=stop, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == cut
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_goes_through_the_template_and_streams_what_it_would_answer(client, model_dir):
    tokenizer = load_tokenizer(model_dir)
    whole = client.chat.completions.create(
        model="step_3", messages=CHAT, max_tokens=12, seed=11, n=2, logprobs=True
    )
    template = apply_chat_template(tokenizer, CHAT, PromptSection(), tokenize=True)
    assert whole.usage.prompt_tokens == len(template)
    assert all(c.message.role == "assistant" and c.logprobs.content for c in whole.choices)
    stream = client.chat.completions.create(
        model="step_3",
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
        client.completions.create(model="step_3", prompt="A stone", max_tokens=6, temperature=0)
        .choices[0]
        .text
        for _ in range(2)
    }
    assert len(answers) == 1


def _schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (dict(prompt="x", max_tokens=100_000), "exceed the model's context"),
        (dict(prompt=["x", ""]), "prompt 1 is empty"),
        (dict(prompt="x", n=17), "n"),
        (dict(prompt="x", logit_bias={"5": 1.0}), "logit_bias is not supported"),
        (dict(prompt="x", stop=["a", "b", "c", "d", "e"]), "stop takes at most 4"),
        (dict(prompt=[999_999]), "prompt token ids must lie in"),
        (dict(prompt=""), "prompt 0 is empty"),
        (dict(prompt="x", extra_body={"typical_p": 0.5}), "unsupported field.*typical_p"),
        (dict(prompt="x", extra_body={"top_k": -2}), "top_k"),
        (dict(prompt="x", extra_body={"response_format": {"type": "yaml"}}), "response_format"),
        (
            dict(
                prompt="x",
                extra_body={"response_format": _schema_format({"type": "object", "minProperties": "x"})},
            ),
            "response_format",
        ),
    ],
)
def test_what_it_cannot_do_is_a_400_naming_it(client, call, message):
    import openai

    with pytest.raises(openai.BadRequestError, match=message):
        client.completions.create(model="step_3", **call)


def test_it_lists_and_retrieves_the_names_it_serves_and_404s_any_other(client):
    import openai

    assert [m.id for m in client.models.list().data] == NAMES
    assert [client.models.retrieve(name).id for name in NAMES] == NAMES
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.models.retrieve("gpt-4o")
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=1)
    answer = client.completions.create(model="tiny-alias", prompt="The tree", max_tokens=2, seed=1)
    assert answer.model == "step_3" and answer.choices[0].text


def test_every_v1_route_wants_the_api_key_and_health_and_metrics_do_not(server):
    import openai

    assert httpx.get(f"{server}/v1/models").status_code == 401
    assert httpx.post(f"{server}/v1/completions", json={"prompt": "x"}).status_code == 401
    with openai.OpenAI(base_url=f"{server}/v1", api_key="sk-wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError, match="API key"):
            wrong.completions.create(model="step_3", prompt="x", max_tokens=1)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    assert httpx.get(f"{server}/health").status_code == 200
    assert httpx.get(f"{server}/metrics").status_code == 200


def test_completion_alternatives_are_the_models_most_likely_first_tokens(client, model_dir):
    out = client.completions.create(model="step_3", prompt="The stone of", max_tokens=3, seed=5, logprobs=3)
    logprobs = out.choices[0].logprobs
    first = logprobs.top_logprobs[0]
    assert len(first) in (3, 4)  # the three most likely, and the sampled token when it is not among them
    assert logprobs.tokens[0] in first and first[logprobs.tokens[0]] == pytest.approx(
        logprobs.token_logprobs[0]
    )
    # At temperature 1 the sampling distribution is the model's own: transformers' forward is the reference.
    tokenizer = load_tokenizer(model_dir)
    ids = tokenizer("The stone of", return_tensors="pt").input_ids
    with torch.no_grad():
        reference = torch.log_softmax(load_model(model_dir)(ids).logits[0, -1].float(), dim=-1)
    values, top = reference.topk(3)
    for token, value in zip(top.tolist(), values.tolist(), strict=True):
        assert first[tokenizer.decode([token])] == pytest.approx(value, abs=1e-4)


def test_chat_top_logprobs_lists_that_many_alternatives_per_token(client):
    import openai

    out = client.chat.completions.create(
        model="step_3", messages=CHAT, max_tokens=5, seed=2, logprobs=True, top_logprobs=4
    )
    for entry in out.choices[0].logprobs.content:
        listed = [alt.logprob for alt in entry.top_logprobs]
        assert len(listed) == 4 and listed == sorted(listed, reverse=True) and listed[0] >= entry.logprob
    with pytest.raises(openai.BadRequestError, match="top_logprobs needs logprobs"):
        client.chat.completions.create(model="step_3", messages=CHAT, max_tokens=1, top_logprobs=2)


def test_vllms_sampling_extensions_change_the_answer_as_they_say(client):
    def text(**extra) -> str:
        out = client.completions.create(
            model="step_3", prompt="The cloud", max_tokens=12, seed=4, extra_body=extra or None
        )
        return out.choices[0].text

    greedy = client.completions.create(model="step_3", prompt="The cloud", max_tokens=12, temperature=0)
    assert text(top_k=1) == greedy.choices[0].text == text(min_p=1.0)  # one candidate left: the argmax
    assert text(top_k=0) == text(top_k=-1) == text() == text(repetition_penalty=1.0, presence_penalty=0)
    penalised = client.completions.create(
        model="step_3", prompt="The cloud", max_tokens=12, temperature=0, frequency_penalty=2.0
    )
    assert penalised.choices[0].text != greedy.choices[0].text


def test_a_json_schema_response_format_constrains_every_choice(client):
    schema = {
        "type": "object",
        "properties": {"word": {"enum": ["tree", "stone", "river"]}, "n": {"type": "integer"}},
        "required": ["word", "n"],
        "additionalProperties": False,
    }
    out = client.chat.completions.create(
        model="step_3",
        messages=CHAT,
        max_tokens=40,
        seed=3,
        n=3,
        response_format=_schema_format(schema),
    )
    for choice in out.choices:
        if choice.finish_reason == "stop":
            document = json.loads(choice.message.content)
            assert set(document) == {"word", "n"} and document["word"] in {"tree", "stone", "river"}
            assert isinstance(document["n"], int)
        else:  # cut by max_tokens: a prefix of such a document
            assert choice.message.content.startswith('{"')
    assert any(choice.finish_reason == "stop" for choice in out.choices)


def test_json_object_output_is_a_json_object_streamed_or_not(client):
    call = dict(model="step_3", prompt="The river", max_tokens=64, seed=12, n=4)
    fmt = {"response_format": {"type": "json_object"}}
    whole = client.completions.create(**call, extra_body=fmt)
    for choice in whole.choices:
        assert choice.text.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.text), dict)
    texts = ["" for _ in whole.choices]
    for chunk in client.completions.create(**call, extra_body=fmt, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [c.text for c in whole.choices]


def test_a_request_joins_the_running_batch_instead_of_waiting_for_it(client):
    """A long stream is running; a short request sent meanwhile is answered before the stream ends."""
    forced_long = _schema_format({"type": "string", "minLength": 400})  # no stop token before 400 characters
    stream = client.completions.create(
        model="step_3",
        prompt="The tree",
        max_tokens=200,
        seed=1,
        stream=True,
        extra_body={"response_format": forced_long},
    )
    running, chunks, ended = threading.Event(), [], []

    def read() -> None:
        for chunk in stream:
            chunks.append(chunk)
            running.set()
        ended.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()
    assert running.wait(60)
    short = client.completions.create(model="step_3", prompt="The stone", max_tokens=2, seed=1)
    answered = time.monotonic()
    reader.join(120)
    assert short.choices[0].finish_reason == "length" and len(short.choices[0].text) > 0
    assert chunks[-1].choices[0].finish_reason == "length" and len(chunks) > 50
    assert answered < ended[0]  # it did not wait for the long completion to end


def test_each_request_is_a_log_line_and_counted_in_the_metrics(client, server, serve_process):
    client.completions.create(model="step_3", prompt="The tree of", max_tokens=3, seed=0)
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server}/metrics").text)}
    answered = {
        (s.labels["path"], s.labels["status"]): s.value
        for s in families["swarmrl_serve_requests"].samples
        if s.name.endswith("_total")
    }
    assert answered[("/v1/completions", "200")] >= 1 and answered[("/v1/completions", "400")] >= 1
    completion_tokens = families["swarmrl_serve_completion_tokens"].samples[0].value
    assert completion_tokens >= 3
    assert {"swarmrl_serve_requests_waiting", "swarmrl_serve_requests_running"} <= set(families)
    latency = {
        s.name: s.value
        for s in families["swarmrl_serve_request_seconds"].samples
        if s.labels["path"] == "/v1/completions"
    }
    assert latency["swarmrl_serve_request_seconds_count"] >= 1
    _, process = serve_process
    wait_for(
        lambda: re.search(
            r"POST /v1/completions 200 [0-9.]+s .*prompt_tokens=\d+ completion_tokens=3", process.tail(400)
        ),
        10,
        "the request's log line",
    )


def test_chat_refuses_tools(client):
    import openai

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="tools are not supported"):
        client.chat.completions.create(model="step_3", messages=CHAT, tools=[tool])


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


@pytest.mark.slow
def test_a_directory_without_weights_and_a_port_in_use_are_one_line_before_loading(tmp_path, model_dir):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (bare / name).write_bytes((model_dir / name).read_bytes())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for model, message in ((bare, "no weights"), (model_dir, "already in use")):
            result = subprocess.run(
                [sys.executable, "-m", "swarmrl.cli", "serve", "--model", str(model), "--port", str(port)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
            assert message in result.stderr
