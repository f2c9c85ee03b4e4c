import pytest
import torch

from swarmrl.configs.diloco import InnerOptimizerConfig, TinyModelConfig
from swarmrl.diloco.codecs import make_codec
from swarmrl.diloco.communicators.local import LocalCommunicator
from swarmrl.diloco.errors import DiLoCoStateError
from swarmrl.diloco.model import VOCAB_SIZE, build_tiny_causal_lm
from swarmrl.diloco.train import language_model_loss, make_inner_optimizer
from swarmrl.diloco.wrapper import DiLoCo

torch.set_num_threads(1)

MODEL = TinyModelConfig(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)
H = 3


def _batch(step: int) -> torch.Tensor:
    return torch.randint(0, VOCAB_SIZE, (2, 9), generator=torch.Generator().manual_seed(1000 + step))


def _make(fragments: int = 1, overlap: int = 0, outer_lr: float = 0.7, momentum: float = 0.9):
    model = build_tiny_causal_lm(MODEL)
    inner, _ = make_inner_optimizer(model, InnerOptimizerConfig(), total_steps=100)
    diloco = DiLoCo(
        model,
        inner,
        LocalCommunicator(),
        make_codec("fp32"),
        inner_steps=H,
        outer_lr=outer_lr,
        outer_momentum=momentum,
        n_fragments=fragments,
        overlap_steps=overlap,
    )
    return model, diloco


def _train(model, diloco, first_step: int, n_steps: int) -> None:
    for step in range(first_step, first_step + n_steps):
        language_model_loss(model, _batch(step)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        diloco.step()
        diloco.zero_grad()


@pytest.mark.parametrize("fragments", [1, 3])
def test_resume_from_checkpoint_gives_identical_weights(tmp_path, fragments):
    straight_model, straight = _make(fragments)
    _train(straight_model, straight, 0, 2 * H)

    first_model, first = _make(fragments)
    _train(first_model, first, 0, H)
    torch.save({"model": first_model.state_dict(), "diloco": first.state_dict()}, tmp_path / "ckpt.pt")
    first.close()

    checkpoint = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed_model, resumed = _make(fragments)
    resumed_model.load_state_dict(checkpoint["model"])
    resumed.load_state_dict(checkpoint["diloco"])
    _train(resumed_model, resumed, H, H)

    assert resumed.local_step == straight.local_step == 2 * H
    for (name, a), b in zip(
        straight_model.state_dict().items(), resumed_model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    for fa, fb in zip(straight.fragments, resumed.fragments, strict=True):
        for ga, gb in zip(fa.global_params, fb.global_params, strict=True):
            assert torch.equal(ga, gb)


def test_outer_lr_one_without_momentum_reduces_to_plain_inner_training():
    # θ_global − 1·(θ_global − θ_local) = θ_local: a single worker then trains exactly like plain AdamW.
    model, diloco = _make(outer_lr=1.0, momentum=0.0)
    _train(model, diloco, 0, 2 * H)
    plain = build_tiny_causal_lm(MODEL)
    optimizer, _ = make_inner_optimizer(plain, InnerOptimizerConfig(), total_steps=100)
    for step in range(2 * H):
        language_model_loss(plain, _batch(step)).backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    for a, b in zip(model.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_sync_moves_local_weights_to_the_outer_step_result():
    model, diloco = _make()
    before = [g.clone() for g in diloco.fragments[0].global_params]
    _train(model, diloco, 0, H)
    assert len(diloco.sync_log) == 1 and diloco.sync_log[0].sent_at_step == H
    for param, global_param, old in zip(
        model.parameters(), diloco.fragments[0].global_params, before, strict=True
    ):
        assert torch.equal(param.detach(), global_param)
        assert not torch.equal(global_param, old)


def test_streaming_fragments_sync_at_staggered_steps_and_block_checkpoints_in_flight():
    model, diloco = _make(fragments=3, overlap=1)
    _train(model, diloco, 0, H)
    # Fragment 0 sent after step 1, fragment 1 after step 2, fragment 2 after step 3 (still in flight).
    assert [(r.fragment, r.sent_at_step) for r in diloco.sync_log][:2] == [(0, 1), (1, 2)]
    with pytest.raises(DiLoCoStateError):
        diloco.state_dict()
    diloco.finish()
    assert len(diloco.sync_log) == 3
    diloco.state_dict()
    diloco.close()


def test_loading_a_checkpoint_of_another_shape_is_refused():
    _, three_fragments = _make(fragments=3)
    _, one_fragment = _make(fragments=1)
    with pytest.raises(DiLoCoStateError):
        one_fragment.load_state_dict(three_fragments.state_dict())
