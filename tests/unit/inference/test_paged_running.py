"""A running batch that requests join between steps (the server's continuous batching): a request that joins
late gets a row at once, finishes before the long one it joined, and is sampled exactly as it would be alone;
rows with their own processing share the batch without changing their neighbours' tokens."""

from __future__ import annotations

import torch
from inference_testkit import prompts, tiny_model

from swarmrl.configs.engine import PagedEngineConfig
from swarmrl.inference import GenerationRequest, PagedEngine, SamplingParams
from swarmrl.inference.paged.running import Row
from swarmrl.inference.processing import LogitsProcessing

torch.set_num_threads(1)
PARAMS = SamplingParams(max_new_tokens=24, temperature=1.0, ignore_eos=True)


def engine() -> PagedEngine:
    return PagedEngine(tiny_model(), PagedEngineConfig(block_size=4))


def run(batch, finished: dict[int, list[int]]) -> None:
    for sequence, _ in batch.step():
        finished[sequence.index] = list(sequence.completion_ids)


def test_a_late_request_joins_the_running_batch_and_samples_as_it_would_alone():
    paged = engine()
    long_prompt, short_prompt = prompts(2, seed=5)
    alone = paged.generate([GenerationRequest(short_prompt, seed=9, max_new_tokens=3)], PARAMS)[0]
    finished: dict[int, list[int]] = {}
    with torch.inference_mode(), paged.running() as batch:
        (long_index,) = batch.add([GenerationRequest(long_prompt, seed=8)], PARAMS)
        for _ in range(5):
            run(batch, finished)
        (short_index,) = batch.add([GenerationRequest(short_prompt, seed=9, max_new_tokens=3)], PARAMS)
        run(batch, finished)  # the next step admits it: a prefill beside the running row
        assert batch.running == 2 and batch.waiting == 0
        while short_index not in finished:
            run(batch, finished)
        assert long_index not in finished  # it did not wait for the long one to end
        while batch.has_work:
            run(batch, finished)
    assert finished[short_index] == alone.completion_ids
    assert len(finished[long_index]) == PARAMS.max_new_tokens


def test_rows_with_their_own_processing_leave_their_neighbours_tokens_alone():
    paged = engine()
    requests = [GenerationRequest(p, seed=40 + i) for i, p in enumerate(prompts(4, seed=6))]
    alone = paged.generate(requests, PARAMS)
    greedy = paged.generate(requests[:1], SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True))
    finished: dict[int, list[int]] = {}
    rows = [Row(processing=LogitsProcessing(top_k=1)), Row(top_logprobs=3), Row(), Row()]
    seen = []
    rows[1].on_token = lambda sampled: seen.append(sampled) and False
    with torch.inference_mode(), paged.running() as batch:
        indices = batch.add(requests, PARAMS, rows)
        while batch.has_work:
            run(batch, finished)
    assert finished[indices[0]] == greedy[0].completion_ids  # top-k 1 is greedy decoding, whatever the seed
    for index, expected in zip(indices[1:], alone[1:], strict=True):
        assert finished[index] == expected.completion_ids
    assert [s.token for s in seen] == alone[1].completion_ids
    for sampled, logprob in zip(seen, alone[1].logprobs, strict=True):
        assert len(sampled.alternatives) == 3 and sampled.logprob == logprob
        assert [lp for _, lp in sampled.alternatives] == sorted(
            (lp for _, lp in sampled.alternatives), reverse=True
        )
        assert sampled.alternatives[0][1] >= sampled.logprob
