import json

import pytest

from swarmrl.configs.tasks import ReasoningGymSourceConfig
from swarmrl.tasks import reasoning_gym_source
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.reasoning_gym_source import ReasoningGymSource, ReasoningGymVerifier
from swarmrl.tasks.task import Task, TaskSource

SMALL_SUMS = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+", "-"],
    "allow_parentheses": False,
    "allow_negation": False,
}


def source(**overrides):
    fields = {"generator": "basic_arithmetic", "size": 300, "eval_size": 60, "generator_kwargs": SMALL_SUMS}
    return ReasoningGymSource(ReasoningGymSourceConfig(**{**fields, **overrides}))


def test_deterministic_by_seed_and_kwargs_pass_through():
    a, b = source(), source()
    assert isinstance(a, TaskSource)
    assert [a[i] for i in range(len(a))] == [b[i] for i in range(len(b))]
    assert [a[i].prompt for i in range(20)] != [source(seed=5)[i].prompt for i in range(20)]
    # "one digit" operands run up to 10 in reasoning-gym: "Calculate 10 + 10." is the longest prompt
    assert max(len(a[i].prompt) for i in range(len(a))) == len("Calculate 10 + 10.")


def test_heldout_questions_never_leak_into_train():
    train, held_out = source(), source(split="eval")
    assert len(held_out) == 60
    train_prompts = {train[i].prompt for i in range(len(train))}
    assert not train_prompts & {held_out[i].prompt for i in range(len(held_out))}
    # the question space is small (≈200 sums), so collisions with held-out were really removed
    assert len(train) < 300
    assert {train[i].task_id for i in range(len(train))}.isdisjoint({held_out[i].task_id for i in range(60)})


def test_compact_and_system_templates():
    compact = source(prompt_template="{expression} =")
    assert compact[0].prompt.endswith(" =") and len(compact[0].prompt) <= 7
    assert "<answer>" in source(prompt_template="system")[0].prompt
    with pytest.raises(TaskError, match="does not fit"):
        source(prompt_template="{no_such_field}")[0]


def test_verifier_uses_score_answer_on_extracted_answer():
    task = source(demonstration_template="</think>{answer}")[0]
    answer = task.verification_info["answer"]
    verifier = ReasoningGymVerifier()
    assert task.demonstration == f"</think>{answer}"
    assert verifier.score(task, task.demonstration) == 1.0
    assert verifier.score(task, f"<think>hmm {answer}</think><answer>{answer}</answer>") == 1.0
    assert verifier.score(task, f"{answer} </think> 1234") == 0.0
    assert verifier.score(task, "") == 0.0


def test_tampered_answer_field_does_not_change_the_verdict():
    task = source()[0]
    forged = Task(task.task_id, task.prompt, task.task_type, {**task.verification_info, "answer": "999"})
    assert ReasoningGymVerifier().score(forged, "999") == 0.0


def test_malformed_entries_and_unknown_generators():
    verifier = ReasoningGymVerifier()
    with pytest.raises(TaskError):
        verifier.score(Task("x", "q", "reasoning_gym", {"generator": "basic_arithmetic"}), "1")
    with pytest.raises(TaskError):
        verifier.score(
            Task(
                "x", "q", "reasoning_gym", {"generator": "basic_arithmetic", "seed": 0, "size": 5, "index": 9}
            ),
            "1",
        )
    with pytest.raises(TaskError, match="unknown reasoning-gym generator"):
        source(generator="no_such_generator")
    with pytest.raises(TaskError, match="rejected"):
        source(generator_kwargs={"not_a_field": 1})


def _every(tasks) -> list[Task]:
    return [tasks[i] for i in range(len(tasks))]


def _config(**overrides) -> ReasoningGymSourceConfig:
    fields = {"generator": "basic_arithmetic", "size": 300, "eval_size": 60, "generator_kwargs": SMALL_SUMS}
    return ReasoningGymSourceConfig(**{**fields, **overrides})


def _no_generator(*args, **kwargs):
    raise AssertionError("reasoning-gym was asked to draw a split the cache holds")


def test_a_cached_split_is_read_back_task_for_task_without_reasoning_gym(tmp_path, monkeypatch):
    drawn = ReasoningGymSource(_config(prompt_template="{question} Answer:"), tmp_path)
    assert _every(drawn) == _every(source(prompt_template="{question} Answer:"))  # as without a cache
    (written,) = (tmp_path / "reasoning_gym").iterdir()
    monkeypatch.setattr(reasoning_gym_source, "load_generator", _no_generator)
    cached = ReasoningGymSource(_config(prompt_template="{question} Answer:"), tmp_path)
    assert len(cached) == len(drawn) < 300  # the held-out questions stay out
    assert _every(cached) == _every(drawn)
    assert list((tmp_path / "reasoning_gym").iterdir()) == [written]
    monkeypatch.undo()
    # Another seed, template or reasoning-gym version is another split: drawn, not read.
    other = ReasoningGymSource(_config(seed=5), tmp_path)
    assert _every(other) == _every(source(seed=5))
    assert len(list((tmp_path / "reasoning_gym").iterdir())) == 2
    monkeypatch.setattr(reasoning_gym_source.importlib.metadata, "version", lambda name: "0.0.0-other")
    other_version = reasoning_gym_source._split_key(_config())
    assert reasoning_gym_source._split_cache_path(tmp_path, "basic_arithmetic", other_version) != written


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: b"{not json",
        lambda doc: json.dumps([doc]).encode(),
        lambda doc: json.dumps({**doc, "key": {**doc["key"], "format": -1}}).encode(),
        lambda doc: json.dumps({**doc, "rows": [[10_000, "Calculate 1 + 1.", "2"]]}).encode(),
        lambda doc: json.dumps({**doc, "rows": [[True, "Calculate 1 + 1.", "2"]]}).encode(),
        lambda doc: json.dumps({**doc, "rows": [[0, None, "2"]]}).encode(),
        lambda doc: json.dumps({**doc, "rows": {"0": "x"}}).encode(),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "another-key",
        "index-out-of-range",
        "bool-index",
        "no-prompt",
        "no-rows",
    ],
)
def test_a_damaged_cache_is_drawn_again_and_rewritten(tmp_path, damage):
    expected = _every(ReasoningGymSource(_config(), tmp_path))
    (path,) = (tmp_path / "reasoning_gym").iterdir()
    path.write_bytes(damage(json.loads(path.read_bytes())))
    assert _every(ReasoningGymSource(_config(), tmp_path)) == expected
    assert json.loads(path.read_bytes())["rows"][0][0] == int(expected[0].verification_info["index"])


def test_the_eval_split_is_never_cached(tmp_path):
    assert len(ReasoningGymSource(_config(split="eval"), tmp_path)) == 60
    assert not (tmp_path / "reasoning_gym").exists()
