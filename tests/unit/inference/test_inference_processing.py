"""The server's logits processing: hand-computed penalties and cut-offs, transformers' own logits processors as
the reference, and the rule that a row asking for nothing is the rollouts' sampler bit for bit."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
)

from swarmrl.inference.processing import (
    History,
    LogitsProcessing,
    choose_processed,
    penalised_logits,
    processed_log_probs,
    top_alternatives,
)
from swarmrl.inference.sampler import choose, sampling_log_probs

LOGITS = torch.tensor([[2.0, -1.0, 0.5, 0.0, 3.0]])


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    history = [History(prompt_ids=[1], completion_ids=[0, 0])]
    out = penalised_logits(LOGITS, history, LogitsProcessing(repetition_penalty=2.0))
    assert out.tolist() == [[1.0, -2.0, 0.5, 0.0, 3.0]]


def test_presence_and_frequency_penalties_follow_openais_formula():
    # logit − frequency · count − presence · [count > 0], over completion tokens only (the prompt's 2 is free).
    history = [History(prompt_ids=[2], completion_ids=[4, 4, 1])]
    out = penalised_logits(LOGITS, history, LogitsProcessing(presence_penalty=0.5, frequency_penalty=0.25))
    assert out.tolist() == [[2.0, -1.0 - 0.25 - 0.5, 0.5, 0.0, 3.0 - 0.5 - 0.5]]


def test_penalties_match_transformers_repetition_processor():
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    ids = torch.randint(0, 50, (3, 7))
    expected = RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone())
    histories = [History(prompt_ids=row[:3].tolist(), completion_ids=row[3:].tolist()) for row in ids]
    got = penalised_logits(logits, histories, LogitsProcessing(repetition_penalty=1.3))
    assert torch.equal(got, expected)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_top_k_keeps_what_transformers_keeps(k):
    torch.manual_seed(1)
    logits = torch.randn(4, 40)
    expected = torch.isfinite(TopKLogitsWarper(k)(None, logits.clone()))
    got = torch.isfinite(
        processed_log_probs(logits, 1.0, 1.0, LogitsProcessing(top_k=k), [History([], [])] * 4)
    )
    assert torch.equal(got, expected)


def test_min_p_keeps_what_transformers_keeps():
    torch.manual_seed(2)
    logits = torch.randn(4, 40) * 3
    expected = torch.isfinite(MinPLogitsWarper(0.1, min_tokens_to_keep=1)(None, logits.clone()))
    got = torch.isfinite(
        processed_log_probs(logits, 1.0, 1.0, LogitsProcessing(min_p=0.1), [History([], [])] * 4)
    )
    assert torch.equal(got, expected)


def test_a_mask_and_top_k_renormalise_over_what_is_left():
    allowed = torch.tensor([[True, True, True, False, False]])
    log_probs = processed_log_probs(LOGITS, 1.0, 1.0, LogitsProcessing(top_k=2), [History([], [])], allowed)
    # Allowed: 0 (2.0), 1 (−1.0), 2 (0.5); top-2 of those: 0 and 2.
    norm = math.log(math.exp(2.0) + math.exp(0.5))
    assert log_probs[0, 0].item() == pytest.approx(2.0 - norm)
    assert log_probs[0, 2].item() == pytest.approx(0.5 - norm)
    assert torch.isinf(log_probs[0, [1, 3, 4]]).all()


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_identity_processing_is_the_rollout_sampler(temperature, top_p):
    torch.manual_seed(3)
    logits = torch.randn(16, 300)
    seeds, positions = list(range(100, 116)), list(range(16))
    tokens, logprobs = choose(logits, seeds, positions, temperature, top_p)
    log_probs = processed_log_probs(logits, temperature, top_p, LogitsProcessing(), [History([], [])] * 16)
    assert torch.equal(log_probs, sampling_log_probs(logits, temperature, top_p))
    got_tokens, got_logprobs = choose_processed(log_probs, seeds, positions, temperature)
    assert torch.equal(got_tokens, tokens) and torch.equal(got_logprobs, logprobs)


def test_alternatives_are_the_most_likely_first_and_ties_by_token_id():
    log_probs = torch.log_softmax(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), dim=-1)
    (row,) = top_alternatives(log_probs, 3)
    assert [t for t, _ in row] == [1, 2, 0]
    assert row[0][1] == pytest.approx(log_probs[0, 1].item())
