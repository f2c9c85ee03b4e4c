"""First-fit-decreasing packing, packed tensors, the block mask, and a packed forward of a tiny Qwen2."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from trainer_testkit import tiny_model
from transformers import Qwen2ForCausalLM

from swarmrl.configs.loss import GSPOClip, LossConfig, TwoSidedClip
from swarmrl.trainer.losses import policy_loss
from swarmrl.trainer.packing import PackingError, block_causal_mask, pack_examples, pack_sequences

torch.set_num_threads(1)
PAD = 0


def test_first_fit_decreasing_by_hand() -> None:
    # Longest first, ties by index: 7(i1) 5(i2) 5(i4) 3(i0) 2(i3) 1(i5) into rows of 10:
    #   i1 → row 0 (3 free); i2 → row 1 (5 free); i4 → row 1 (0 free); i0 → row 0 (0 free);
    #   i3 → row 2 (8 free); i5 → row 2.
    assert pack_sequences([3, 7, 5, 2, 5, 1], capacity=10) == [[1, 0], [2, 4], [3, 5]]


def test_packing_is_empty_for_no_sequences() -> None:
    assert pack_sequences([], capacity=4) == []


@pytest.mark.parametrize(
    ("lengths", "capacity", "problem"),
    [
        ([3, 11], 10, "sequence 1 has length 11"),
        ([0], 10, "length 0"),
        ([-2], 10, "length -2"),
        ([1], 0, "capacity"),
    ],
)
def test_unpackable_input_raises(lengths: list[int], capacity: int, problem: str) -> None:
    with pytest.raises(PackingError, match=problem):
        pack_sequences(lengths, capacity)


@given(st.lists(st.integers(1, 20), max_size=40), st.integers(20, 40))
def test_packing_properties(lengths: list[int], capacity: int) -> None:
    bins = pack_sequences(lengths, capacity)
    assert sorted(itertools.chain.from_iterable(bins)) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in b) for b in bins]
    assert all(load <= capacity for load in loads)
    # First fit never leaves two rows that would fit into one.
    assert all(a + b > capacity for a, b in itertools.combinations(loads, 2))
    assert pack_sequences(lengths, capacity) == bins


EXAMPLES = [([1, 2], [3, 4, 5]), ([6], [7]), ([8, 9, 10], [11])]


def test_packed_tensors_by_hand() -> None:
    # lengths 5, 2, 4 into rows of 8: i0 → row 0, i2 → row 1 (4 > 3 free), i1 → row 0
    packed = pack_examples(EXAMPLES, capacity=8, pad_token_id=PAD)
    assert packed.rows == [[0, 1], [2]]
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7, PAD], [8, 9, 10, 11, PAD, PAD, PAD, PAD]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 0], [0, 1, 2, 3, 0, 1, 2, 3]]
    assert packed.sequence_ids.tolist() == [[0, 0, 0, 0, 0, 1, 1, -1], [2, 2, 2, 2, -1, -1, -1, -1]]
    # target t + 1 scored when it is a completion token: row 0 targets 2,3,4,5,6,7,PAD
    assert packed.loss_mask.int().tolist() == [[0, 1, 1, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0, 0]]
    assert packed.target_sequence_ids.tolist() == [[-1, 0, 0, 0, -1, 1, -1], [-1, -1, 2, -1, -1, -1, -1]]
    assert packed.cu_seqlens.tolist() == [0, 5, 7, 8, 12, 16]
    assert packed.max_seqlen == 5
    assert [(s.row, s.start, s.length) for s in packed.completion_spans] == [(0, 1, 3), (0, 5, 1), (1, 2, 1)]
    engine = packed.per_completion_token([[-0.1, -0.2, -0.3], [-0.4], [-0.5]])
    expected_engine = [[0.0, -0.1, -0.2, -0.3, 0.0, -0.4, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0]]
    torch.testing.assert_close(engine, torch.tensor(expected_engine))
    with pytest.raises(PackingError, match="sequence 1: 2 values for 1 completion tokens"):
        packed.per_completion_token([[-0.1, -0.2, -0.3], [-0.4, -0.4], [-0.5]])
    with pytest.raises(PackingError, match="2 value lists for 3 sequences"):
        packed.per_completion_token([[-0.1, -0.2, -0.3], [-0.4]])
    advantages = torch.tensor([1.0, -2.0, 3.0])
    assert packed.per_target_token(advantages).tolist() == [
        [0.0, 1.0, 1.0, 1.0, 0.0, -2.0, 0.0],
        [0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0],
    ]


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(1, 63), min_size=1, max_size=6), st.lists(st.integers(1, 63), max_size=6)
        ),
        max_size=12,
    )
)
def test_packed_targets_round_trip_every_completion(examples: list[tuple[list[int], list[int]]]) -> None:
    packed = pack_examples(examples, capacity=12, pad_token_id=PAD)
    targets = packed.input_ids[:, 1:]
    for index, (_, completion) in enumerate(examples):
        assert packed.unpack_targets(targets, index).tolist() == completion
        assert targets[(packed.target_sequence_ids == index) & packed.loss_mask].tolist() == completion
    placed = packed.per_completion_token([[float(t) for t in c] for _, c in examples])
    assert torch.equal(placed, torch.where(packed.loss_mask, targets, 0).float())
    assert int(packed.loss_mask.sum()) == sum(len(c) for _, c in examples)
    assert packed.cu_seqlens[-1].item() == packed.input_ids.numel()


def test_pack_examples_rejects_an_empty_prompt_and_an_overlong_example() -> None:
    with pytest.raises(PackingError, match="empty prompt"):
        pack_examples([([], [1, 2])], capacity=8, pad_token_id=PAD)
    with pytest.raises(PackingError, match="longer than the row capacity"):
        pack_examples([([1] * 5, [2] * 5)], capacity=8, pad_token_id=PAD)


def test_block_causal_mask_by_hand() -> None:
    mask = block_causal_mask(torch.tensor([[0, 0, 1, 1, -1]]), dtype=torch.float32)
    assert mask.shape == (1, 1, 5, 5)
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 0, 1],
    ]
    assert mask[0, 0, 0, 1].item() == torch.finfo(torch.float32).min


@pytest.fixture(scope="module")
def tiny_qwen2() -> Qwen2ForCausalLM:
    return tiny_model().eval()


def completion_logprobs(model: Qwen2ForCausalLM, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        log_probs = F.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
    chosen = log_probs.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)
    return chosen[len(prompt) - 1 :]


def packed_logprobs(model: Qwen2ForCausalLM, packed, **forward) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, **forward).logits
    log_probs = F.log_softmax(logits[:, :-1].double(), dim=-1)
    return log_probs.gather(-1, packed.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def random_examples(count: int, seed: int) -> list[tuple[list[int], list[int]]]:
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(count):
        prompt_len, completion_len = torch.randint(1, 8, (2,), generator=generator).tolist()
        ids = torch.randint(1, 64, (prompt_len + completion_len,), generator=generator).tolist()
        examples.append((ids[:prompt_len], ids[prompt_len:]))
    return examples


def test_packed_forward_with_block_mask_matches_one_by_one(tiny_qwen2: Qwen2ForCausalLM) -> None:
    examples = random_examples(7, seed=1)
    packed = pack_examples(examples, capacity=20, pad_token_id=PAD)
    assert any(len(row) > 1 for row in packed.rows)  # the test must actually pack
    inputs = packed.model_inputs(dtype=torch.float32)
    assert torch.equal(inputs["attention_mask"], block_causal_mask(packed.sequence_ids))
    per_target = packed_logprobs(tiny_qwen2, packed, attention_mask=inputs["attention_mask"])
    for index, (prompt, completion) in enumerate(examples):
        torch.testing.assert_close(
            packed.unpack_targets(per_target, index),
            completion_logprobs(tiny_qwen2, prompt, completion),
            atol=1e-5,
            rtol=0,
        )


def test_packed_forward_without_block_mask_leaks_across_sequences(tiny_qwen2: Qwen2ForCausalLM) -> None:
    # A plain 2D mask lets the second sequence of a row attend to the first: the block mask is what isolates.
    examples = [([5, 6, 7], [8, 9]), ([10, 11], [12, 13])]
    packed = pack_examples(examples, capacity=9, pad_token_id=PAD)
    leaky = packed_logprobs(tiny_qwen2, packed, attention_mask=torch.ones_like(packed.input_ids))
    alone = completion_logprobs(tiny_qwen2, *examples[1])
    assert not torch.allclose(packed.unpack_targets(leaky, 1), alone, atol=1e-5)


@pytest.mark.parametrize("objective", [TwoSidedClip(), GSPOClip()], ids=lambda o: o.kind)
@pytest.mark.parametrize("normalisation", ["token", "sequence", "constant"])
def test_policy_loss_on_packed_rows_equals_padded_rows(objective, normalisation: str) -> None:
    examples = random_examples(6, seed=2)
    generator = torch.Generator().manual_seed(3)
    old = [-torch.rand(len(c), generator=generator, dtype=torch.float64) for _, c in examples]
    new = [o + 1e-3 * torch.randn(len(o), generator=generator, dtype=torch.float64) for o in old]
    advantages = torch.randn(len(examples), generator=generator, dtype=torch.float64)
    config = LossConfig(objective=objective, normalisation=normalisation, max_tokens=10)

    width = max(len(c) for _, c in examples)
    padded_mask = torch.zeros(len(examples), width, dtype=torch.bool)
    padded_new = torch.zeros(len(examples), width, dtype=torch.float64)
    padded_old = torch.zeros_like(padded_new)
    for i, (_, completion) in enumerate(examples):
        padded_mask[i, : len(completion)] = True
        padded_new[i, : len(completion)], padded_old[i, : len(completion)] = new[i], old[i]
    expected = policy_loss(padded_new, padded_old, advantages, padded_mask, config=config)

    packed = pack_examples(examples, capacity=16, pad_token_id=PAD)
    packed_new = torch.zeros(packed.loss_mask.shape, dtype=torch.float64)
    packed_old = torch.zeros_like(packed_new)
    for i in range(len(examples)):
        where = (packed.target_sequence_ids == i) & packed.loss_mask
        packed_new[where], packed_old[where] = new[i], old[i]
    actual = policy_loss(
        packed_new,
        packed_old,
        packed.per_target_token(advantages),
        packed.loss_mask,
        config=config,
        sequence_ids=packed.target_sequence_ids,
    )
    torch.testing.assert_close(actual.loss, expected.loss, atol=1e-12, rtol=0)
