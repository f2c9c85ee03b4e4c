"""A local CPU run's trainer trains on every core while its workers wait, on one thread while they generate
(`swarmrl.trainer.core_share`): the count is looked up before each decoder layer's forward and backward."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from swarmrl.trainer.core_share import CoreShare, decoder_layers


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def tiny_lm(layers: int = 3) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    return Qwen2ForCausalLM(config)


def test_threads_follow_the_workers():
    idle = [False]
    share = CoreShare(lambda: idle[0], cores=3, own=1, recheck_s=0.0)
    share.adjust()
    assert torch.get_num_threads() == 1
    idle[0] = True
    share.adjust()
    assert torch.get_num_threads() == 3
    share.release()
    assert torch.get_num_threads() == 1


def test_the_workers_are_looked_up_at_most_every_recheck_interval():
    asked = []
    share = CoreShare(lambda: asked.append(1) or True, cores=2, own=1, recheck_s=3600.0)
    share.adjust()
    share.adjust()
    assert len(asked) == 1 and torch.get_num_threads() == 2
    share.release()  # a release forgets the last look: the next pass looks again
    share.adjust()
    assert len(asked) == 2 and torch.get_num_threads() == 2


def test_every_layer_looks_before_its_forward_and_its_backward():
    model = tiny_lm(layers=3)
    threads_seen: list[int] = []
    share = CoreShare(lambda: not threads_seen.append(torch.get_num_threads()), cores=2, own=1, recheck_s=0.0)
    layers = decoder_layers(model)
    assert layers is not None and len(layers) == 3
    share.attach(layers)
    loss = model(input_ids=torch.randint(0, 32, (2, 8))).logits.float().pow(2).mean()
    assert len(threads_seen) == 3  # one look per layer's forward
    loss.backward()
    assert len(threads_seen) == 6  # and one per layer's backward
    assert threads_seen[1:] == [2] * 5  # the first look raised the count; every pass after it kept it
    share.detach()
    assert torch.get_num_threads() == 1
    model(input_ids=torch.randint(0, 32, (2, 8))).logits.float().pow(2).mean().backward()
    assert len(threads_seen) == 6  # detached: no hook left


def test_a_model_without_decoder_layers_is_named_as_such():
    assert decoder_layers(torch.nn.Linear(2, 2)) is None


def test_busy_workers_leave_the_trainer_its_own_threads():
    share = CoreShare(lambda: False, cores=4, own=2, recheck_s=0.0)
    share.adjust()
    assert torch.get_num_threads() == 2
    share.release()
    assert torch.get_num_threads() == 2


def test_fewer_cores_than_the_trainer_s_own_threads_is_refused():
    with pytest.raises(ValueError, match="own threads"):
        CoreShare(lambda: True, cores=1, own=2)
