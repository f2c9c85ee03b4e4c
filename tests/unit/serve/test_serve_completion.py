"""A completion as the server streams it, token by token: decoded incrementally, it sends exactly the text a
whole decode gives (characters split over several byte-level tokens included), and stops before the first stop
string even when the string spans tokens."""

from __future__ import annotations

import pytest

from swarmrl.inference.paged.running import SampledToken
from swarmrl.models import train_tokenizer
from swarmrl.serve.completion import Completion, Delta, Finished

TEXT = "Ünïcode 🌲 trees, naïve café — the river 🌊 says «hello» to the stone. Done."


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["The river and the stone say hello."] * 10, vocab_size=280)


def streamed(tokenizer, ids, stops=()):
    events = []
    completion = Completion(0, tokenizer, tuple(stops), frozenset(), events.append)
    for token in ids:
        if completion.add(SampledToken(token, -1.0)):
            break
    completion.finish("length")
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert "\ufffd" not in text
    return text, events[-1]


def test_the_streamed_text_is_the_whole_decode(tokenizer):
    ids = tokenizer(TEXT).input_ids
    assert any(
        len(tokenizer.decode([t])) == 0 or "\ufffd" in tokenizer.decode([t]) for t in ids
    )  # split chars
    text, finished = streamed(tokenizer, ids)
    assert text == tokenizer.decode(ids, skip_special_tokens=True) == TEXT
    assert finished == Finished(0, "length", len(ids))


@pytest.mark.parametrize("stop", ["🌊", "river", "s, na", "Done."])
def test_it_stops_before_the_first_stop_string(tokenizer, stop):
    ids = tokenizer(TEXT).input_ids
    text, finished = streamed(tokenizer, ids, [stop, "never there"])
    assert text == TEXT[: TEXT.index(stop)] and finished.finish_reason == "stop"
