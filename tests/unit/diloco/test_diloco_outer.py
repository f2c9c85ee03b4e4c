import pytest
import torch

from swarmrl.diloco.outer import (
    fragment_send_steps,
    make_outer_optimizer,
    pseudo_gradient,
    split_into_fragments,
)

torch.set_num_threads(1)


def test_pseudo_gradient_is_global_minus_local():
    global_params = [torch.tensor([1.0, 2.0, 3.0])]
    local_params = [torch.nn.Parameter(torch.tensor([0.5, 2.5, 3.0]))]
    (delta,) = pseudo_gradient(global_params, local_params)
    assert delta.tolist() == [0.5, -0.5, 0.0]
    # Stepping *against* Δ with plain SGD (lr 1, no momentum) lands on the local weights.
    optimizer = torch.optim.SGD(global_params, lr=1.0)
    global_params[0].grad = delta
    optimizer.step()
    assert global_params[0].tolist() == [0.5, 2.5, 3.0]


def test_pseudo_gradient_is_fp32_even_for_bf16_locals():
    (delta,) = pseudo_gradient([torch.zeros(2)], [torch.ones(2, dtype=torch.bfloat16)])
    assert delta.dtype == torch.float32


def test_outer_nesterov_two_steps_match_hand_computation():
    # lr 0.7, momentum 0.9. θ0 = [1.0, -2.0]; Δ1 = [0.5, 0.1]; Δ2 = [-0.2, 0.3].
    # Step 1: m1 = Δ1 = [0.5, 0.1]; update = Δ1 + 0.9 m1 = [0.95, 0.19]
    #         θ1 = θ0 − 0.7 update = [1 − 0.665, −2 − 0.133] = [0.335, −2.133]
    # Step 2: m2 = 0.9 m1 + Δ2 = [0.45 − 0.2, 0.09 + 0.3] = [0.25, 0.39]
    #         update = Δ2 + 0.9 m2 = [−0.2 + 0.225, 0.3 + 0.351] = [0.025, 0.651]
    #         θ2 = θ1 − 0.7 update = [0.335 − 0.0175, −2.133 − 0.4557] = [0.3175, −2.5887]
    theta = torch.tensor([1.0, -2.0])
    optimizer = make_outer_optimizer([theta], lr=0.7, momentum=0.9)
    theta.grad = torch.tensor([0.5, 0.1])
    optimizer.step()
    assert theta.tolist() == pytest.approx([0.335, -2.133], abs=1e-6)
    theta.grad = torch.tensor([-0.2, 0.3])
    optimizer.step()
    assert theta.tolist() == pytest.approx([0.3175, -2.5887], abs=1e-6)


def test_fragments_are_contiguous_balanced_and_cover_everything():
    numels = [100, 10, 10, 100, 10, 10, 100]
    fragments = split_into_fragments(numels, 3)
    assert [i for f in fragments for i in f] == list(range(7))
    assert len(fragments) == 3 and all(fragments)
    sizes = [sum(numels[i] for i in f) for f in fragments]
    assert max(sizes) <= 2 * min(sizes)


def test_fragments_fall_back_to_even_count_when_one_tensor_dominates():
    fragments = split_into_fragments([10_000, 1, 1, 1], 4)
    assert fragments == [[0], [1], [2], [3]]


def test_fragment_split_rejects_impossible_counts():
    with pytest.raises(ValueError):
        split_into_fragments([1, 2], 3)


def test_send_steps_are_staggered_through_the_window():
    assert fragment_send_steps(1, 100) == [100]
    assert fragment_send_steps(4, 100) == [25, 50, 75, 100]
    assert fragment_send_steps(3, 10) == [3, 6, 10]
