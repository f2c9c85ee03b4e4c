import pytest

from swarmrl.configs.tasks import ReasoningGymSourceConfig
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
