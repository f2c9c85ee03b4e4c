"""The lab's misbehaving worker: its edits on the worker's seams (its command: tests/integration/lab)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from swarmrl_lab.cheat_worker import half_layers, slowed


def test_half_layers_keeps_the_first_half_of_the_decoder_layers():
    layers = ["l0", "l1", "l2", "l3", "l4"]
    model = SimpleNamespace(model=SimpleNamespace(layers=layers), config=SimpleNamespace(num_hidden_layers=5))
    half_layers(model)
    assert (model.model.layers, model.config.num_hidden_layers) == (["l0", "l1"], 2)
    one = SimpleNamespace(model=SimpleNamespace(layers=["l0"]), config=SimpleNamespace(num_hidden_layers=1))
    half_layers(one)
    assert one.model.layers == ["l0"]  # never no layer at all


class RecordedStop(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        self.waited = timeout
        return False


def test_a_slowed_worker_waits_what_makes_each_unit_take_factor_times_as_long():
    stop = RecordedStop()
    slowed(3.0)(2.5, stop)
    assert stop.waited == 5.0
