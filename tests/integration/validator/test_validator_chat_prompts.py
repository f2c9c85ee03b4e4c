"""A chat-model run end to end on the validator's side: the worker prompts through the chat template and stops
at <|im_end|>, the validator rebuilds exactly those prompt ids and accepts; plain-prompted work is refused."""

import dataclasses

import pytest
import torch
from integration.spine.spine_helpers import tiny_config

from swarmrl.generation.batch import generate_batch, write_batch
from swarmrl.identity import Identity
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.launch.prepare import prepare_run
from swarmrl.models import load_model, load_tokenizer
from swarmrl.models.prompting import prompt_format
from swarmrl.models.tokenizer import IM_END, IM_START
from swarmrl.rollouts import RolloutHeader, write_rollouts
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.validator.rollout_checks import validate_file
from swarmrl.validator.service import local_context

NODE = Identity.from_seed(b"\x31" * 32)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    config = tiny_config(
        tmp_path_factory.mktemp("chat"),
        "chat",
        "model.chat_template='chatml'",
        "prompt.format='chat'",
        "prompt.system='Reverse the word.'",
        "prompt.enable_thinking=false",
        "sft.steps=120",
        "contract.prompts_per_batch=4",
        "contract.max_new_tokens=12",
    )
    rundir = prepare_run(config)
    start = rundir.checkpoints / "step_0"
    tokenizer = load_tokenizer(start)
    prompts = prompt_format(tokenizer, config.prompt)
    engine = TorchEngine(load_model(start), eos_token_id=prompts.stop_token_ids, policy_step=0)
    params = SamplingParams(max_new_tokens=config.contract.max_new_tokens, temperature=1.0)
    return config, rundir, tokenizer, engine, params


def spec_of(config, batch=0):
    contract = config.contract
    return BatchSpec.local(
        config.run.id, NODE.node_id, 0, batch, contract.prompts_per_batch, contract.group_size, contract.seed
    )


def test_chat_prompted_batch_is_accepted(run, tmp_path):
    config, rundir, tokenizer, engine, params = run
    context = local_context(rundir.root)
    path = tmp_path / "honest.parquet"
    rows = write_batch(engine, spec_of(config), context.tasks, tokenizer, config, params, path, NODE)
    im_start, im_end = tokenizer.convert_tokens_to_ids([IM_START, IM_END])
    prompt_text = tokenizer.decode(rows[0].prompt_ids)
    assert prompt_text.startswith("<|im_start|>system\nReverse the word.<|im_end|>\n<|im_start|>user\n")
    assert prompt_text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert rows[0].prompt_ids.count(im_start) == 3
    ended = [r for r in rows if r.finish_reason == "eos"]
    assert ended and all(r.completion_ids[-1] == im_end for r in ended)
    verdict = validate_file(path, 0, context, node_id=NODE.node_id)
    assert verdict.accepted, f"{verdict.failed_check}: {verdict.reason}"


def test_plain_prompts_are_not_the_assigned_ones(run, tmp_path):
    config, rundir, tokenizer, engine, params = run
    context = local_context(rundir.root)
    spec = spec_of(config, batch=1)
    plain = prompt_format(tokenizer, config.prompt.model_copy(update={"format": "plain"}))
    rows = generate_batch(engine, spec, assigned_prompts(spec, context.tasks, plain, config.tasks), params)
    path = write_rollouts(
        tmp_path / "plain.parquet", RolloutHeader(config.run.id, NODE.node_id, 0, 1), rows, NODE
    )
    verdict = validate_file(path, 0, context)
    assert verdict.failed_check == "assigned_prompts", verdict.reason


def test_a_length_row_that_holds_the_end_of_turn_is_refused(run, tmp_path):
    config, rundir, tokenizer, engine, params = run
    context = local_context(rundir.root)
    spec = spec_of(config, batch=2)
    prompts = assigned_prompts(spec, context.tasks, prompt_format(tokenizer, config.prompt), config.tasks)
    rows = generate_batch(engine, spec, prompts, params)
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    # Claim to have run on past <|im_end|>, as a worker that ignores the chat stop would.
    first = rows[0]
    padded = [*first.completion_ids[:1], im_end]
    padded += [first.completion_ids[0]] * (config.contract.max_new_tokens - len(padded))
    rows[0] = dataclasses.replace(
        first, completion_ids=padded, logprobs=[0.0] * len(padded), finish_reason="length"
    )
    path = write_rollouts(
        tmp_path / "long.parquet", RolloutHeader(config.run.id, NODE.node_id, 0, 2), rows, NODE
    )
    verdict = validate_file(path, 0, context)
    assert verdict.failed_check == "termination_format", verdict.reason
