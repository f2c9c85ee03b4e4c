"""The preflight reads every local data source, prompts datasets included (columns, first rows, chat or text
prompts), and tries the run's reward functions on those rows: a dataset the run cannot use and a reward
function that cannot score it each fail as one line naming them, before anything starts."""

import itertools

from byo_testkit import USER_REWARDS, prompt_rows, write_jsonl, write_user_module

from swarmrl.configs import RunConfig
from swarmrl.launch.pins import pin_run_code
from swarmrl.launch.preflight import preflight

_names = itertools.count()


def config_for(tmp_path, monkeypatch, dataset, *functions: str, **sections) -> RunConfig:
    module = f"preflight_rewards_{next(_names)}"
    write_user_module(tmp_path / "user", module, monkeypatch, USER_REWARDS)
    source = {"type": "prompts", "name": "mine", "path": str(dataset)}
    tasks = {"sources": [source], "reward_functions": [f"{module}:{f}" for f in functions]}
    config = RunConfig.model_validate({"run": {"root": str(tmp_path / "runs")}, "tasks": tasks, **sections})
    pin_run_code(config)
    return config


def checks(config: RunConfig) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.ok, check.detail) for check in preflight(config).checks}


CHAT = {"model": {"chat_template": "chatml"}, "prompt": {"format": "chat"}}


def test_a_prompts_dataset_is_read_and_each_function_tried_on_its_rows(tmp_path, monkeypatch):
    dataset = write_jsonl(tmp_path / "p.jsonl", prompt_rows(5, chat=True))
    found = checks(config_for(tmp_path, monkeypatch, dataset, "format_reward", "letter_reward", **CHAT))
    ok, detail = found["tasks mine"]
    assert ok, detail
    assert detail.startswith(
        f"{dataset}: columns prompt, solution, source_row; first 3 rows read, chat prompts"
    )
    assert "first prompt 'Write a word like tree'" in detail
    module_checks = [name for name in found if name.startswith("reward function ")]
    assert len(module_checks) == 2 and all(found[name][0] for name in module_checks), found
    assert "reward math" not in found  # the functions score every task: no verifier is asked for


def test_chat_rows_the_run_would_render_as_text_are_refused(tmp_path, monkeypatch):
    dataset = write_jsonl(tmp_path / "p.jsonl", prompt_rows(3, chat=True))
    ok, detail = checks(config_for(tmp_path, monkeypatch, dataset, "format_reward"))["tasks mine"]
    assert not ok and "the prompts are chat messages, which the run would render as plain text" in detail
    assert "set prompt.format = 'chat'" in detail


def test_a_dataset_without_usable_rows_fails_naming_the_row_and_column(tmp_path, monkeypatch):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "2+2?", "solution": "4"}])
    ok, detail = checks(config_for(tmp_path, monkeypatch, bad, "format_reward"))["tasks mine"]
    assert not ok and detail == (
        f"{bad} row 0: column 'prompt' must be a non-empty string or a list of chat messages"
    )
    ok, detail = checks(config_for(tmp_path, monkeypatch, tmp_path / "none.jsonl", "format_reward"))[
        "tasks mine"
    ]
    assert not ok and "none.jsonl does not exist" in detail
    # With no row to try them on (here the dataset's own check fails; a hub dataset is read by the run), the
    # trainer and each validator try them at start.
    assert checks(config_for(tmp_path, monkeypatch, bad, "format_reward"))["reward functions"] == (
        True,
        "not tried here: no rows of the run's data could be read",
    )


def test_a_function_reading_a_column_the_data_lacks_fails_before_the_run(tmp_path, monkeypatch):
    rows = [{"prompt": "Write a word", "answer": "e"}]  # letter_reward wants `solution`
    dataset = write_jsonl(tmp_path / "p.jsonl", rows)
    found = checks(config_for(tmp_path, monkeypatch, dataset, "letter_reward"))
    (name,) = [n for n in found if n.startswith("reward function ")]
    ok, detail = found[name]
    assert not ok and detail.startswith(
        "its parameter 'solution' is never passed: the data's columns are answer"
    )
