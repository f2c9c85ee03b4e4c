"""Datasets in TRL's layout (a prompt string or chat messages, any other columns) from jsonl, parquet and a
`save_to_disk` directory, and chat prompts rendered by the run's chat template."""

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from byo_testkit import prompt_rows, write_jsonl

from swarmrl.configs.model import PromptSection
from swarmrl.configs.tasks import PromptsSourceConfig, TasksConfig
from swarmrl.models.prompting import PromptError, prompt_format
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE, train_tokenizer
from swarmrl.rollouts.assignment import BatchSpec, assigned_prompts
from swarmrl.tasks.errors import TaskError
from swarmrl.tasks.prompts_source import prompt_task
from swarmrl.tasks.registry import build_source


def source(path, **fields):
    return build_source(PromptsSourceConfig(name="mine", path=str(path), **fields))


def test_jsonl_rows_keep_every_column_and_chat_prompts(tmp_path):
    rows = prompt_rows(5, chat=False) + prompt_rows(5, chat=True)
    tasks = source(write_jsonl(tmp_path / "d.jsonl", rows))
    assert len(tasks) == 10 and tasks[0].task_id == "mine/0" and tasks[0].task_type == "prompts"
    assert tasks[0].prompt == "Write a word like tree" and tasks[0].messages is None
    assert tasks[0].verification_info == {"solution": "e", "source_row": 0}
    assert tasks[4].verification_info["solution"] is None
    chat = tasks[5]
    assert chat.messages == ({"role": "user", "content": "Write a word like tree"},)
    assert chat.prompt == "Write a word like tree"


def test_parquet_and_a_saved_dataset_directory_read_alike(tmp_path):
    rows = [{**row, "answer_id": f"id-{i}"} for i, row in enumerate(prompt_rows(6, chat=True))]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "dict"))
    read = [
        source(tmp_path / "d.parquet", id_column="answer_id", limit=4),
        source(tmp_path / "saved", id_column="answer_id", limit=4),
        source(tmp_path / "dict", id_column="answer_id", limit=4),
    ]
    for tasks in read:
        assert [t.task_id for t in tasks] == ["id-0", "id-1", "id-2", "id-3"]
        assert [(t.messages, t.verification_info["solution"]) for t in tasks] == [
            (t.messages, t.verification_info["solution"]) for t in read[0]
        ]
    with pytest.raises(TaskError, match="no split 'test'"):
        source(tmp_path / "dict", hf_split="test")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="not a dataset written by save_to_disk"):
        source(tmp_path / "empty")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "x"}, "column 'prompt' must be"),
        ({"prompt": "x", "completions": 1}, "column 'completions' is a reward-function argument"),
        (
            {"prompt": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            "end on a user",
        ),
        ({"prompt": [{"role": "user", "content": 3}]}, "needs string 'role' and 'content'"),
        ({"prompt": [{"role": "user", "content": "a", "tool_calls": [1]}]}, r"must be \{role, content\}"),
    ],
)
def test_a_row_that_does_not_fit_is_named(tmp_path, row, message):
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "d.parquet")
    with pytest.raises(TaskError, match=f"d.parquet row 0: .*{message}"):
        source(tmp_path / "d.parquet")


def test_a_column_that_is_not_json_is_named():
    with pytest.raises(TaskError, match="here: .*not JSON-able"):
        prompt_task({"prompt": "x", "when": {1, 2}}, PromptsSourceConfig(name="m", path="x.jsonl"), 0, "here")


def test_a_chat_prompt_is_its_conversation_through_the_template(tmp_path):
    rows = [
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a tree"}]},
        {"prompt": [{"role": "user", "content": "Name a stone"}]},
    ]
    tasks = source(write_jsonl(tmp_path / "d.jsonl", rows))
    tokenizer = train_tokenizer(
        ["Name a tree", "Be brief.", "Think for 5 tokens."],
        vocab_size=300,
        chat_template=CHATML_THINK_TEMPLATE,
    )
    fmt = prompt_format(tokenizer, PromptSection(format="chat", system="You help."))
    own_system = tokenizer.apply_chat_template(
        list(tasks[0].messages), add_generation_prompt=True, tokenize=False
    )
    assert fmt.text(tasks[0].prompt, tasks[0].messages) == own_system
    # A conversation without a system turn gets the run's.
    assert fmt.messages(tasks[1].prompt, tasks[1].messages)[0] == {"role": "system", "content": "You help."}
    config = TasksConfig.model_validate(
        {"reward_functions": ["m:f"], "length": {"mode": "exact", "targets": [5]}}
    )
    spec = BatchSpec.local("run", "node", 0, 0, 2, 1, 0)
    for prompt in assigned_prompts(spec, tasks, fmt, config):
        # The length instruction joins the last user turn; the rest of the conversation is the dataset's.
        turns = fmt.messages(f"{prompt.task.prompt}\nThink for 5 tokens.", prompt.task.messages)
        assert prompt.prompt_ids == list(
            tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    with pytest.raises(PromptError, match="set prompt.format = 'chat'"):
        prompt_format(tokenizer, PromptSection(format="plain")).ids(tasks[1].prompt, tasks[1].messages)
