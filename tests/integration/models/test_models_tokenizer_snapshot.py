"""A restarted worker's tokenizer, read back from its snapshot without transformers, encodes, renders and decodes
exactly as transformers does: on the chat templates TRL ships (nobody here wrote them), on a Qwen-sized
tokenizer, on a class transformers customises at load, and on a worker's own reasoning-gym prompts. A damaged
or foreign snapshot is passed over and rewritten; a snapshot that would differ is never written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trl

from swarmrl.configs.model import PromptSection
from swarmrl.models import load_tokenizer, save_pretrained_atomic, train_tokenizer
from swarmrl.models import tokenizer_snapshot as snapshots
from swarmrl.models.prompting import prompt_format
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE
from swarmrl.models.tokenizer_snapshot import (
    SnapshotError,
    SnapshotTokenizer,
    snapshot_key,
    snapshot_of,
    worker_tokenizer,
)

TRL_TEMPLATES = sorted((Path(trl.__file__).parent / "chat_templates").glob("*.jinja"))
TEXTS = [
    f"What is {n} * 791?\n<think>\nsteps\n</think>\n\n<answer>{n * 791}</answer>" for n in range(100, 160)
]
CONVERSATIONS = [
    [{"role": "user", "content": "Spell 'stone' backwards."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}],
    [
        {"role": "user", "content": "Hi <|im_end|> there"},
        {"role": "assistant", "content": "<think>\nthey greet\n</think>\n\nHello!"},
        {"role": "user", "content": "Ünïcödé 中文 🤖, and\n\ttabs  "},
    ],
    [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Because.", "reasoning_content": "it is so"},
        {"role": "user", "content": "Sure?"},
    ],
]


def _save(tmp_path: Path, tokenizer, name: str = "ckpt") -> Path:
    path = tmp_path / name
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory) -> Path:
    tokenizer = train_tokenizer(TEXTS, vocab_size=300, chat_template=CHATML_THINK_TEMPLATE)
    return _save(tmp_path_factory.mktemp("chat"), tokenizer)


def _snapshot(path: Path, settings: PromptSection) -> SnapshotTokenizer:
    key = snapshot_key(path)
    data = snapshot_of(load_tokenizer(path), key, settings)
    return SnapshotTokenizer.read(_written(path.parent / "snap.json", data), key, str(path))


def _written(file: Path, data: dict) -> Path:
    file.write_text(json.dumps(data))
    return file


def test_trls_chat_templates_render_as_transformers_renders_them(chat_dir) -> None:
    reference = load_tokenizer(chat_dir)
    snapshot = _snapshot(chat_dir, PromptSection(format="chat"))
    rendered = 0
    for template in TRL_TEMPLATES:
        reference.chat_template = snapshot.chat_template = template.read_text()
        snapshot._template = None
        for conversation in CONVERSATIONS:
            for generation, thinking in ((True, None), (True, False), (False, True)):
                kwargs = {} if thinking is None else {"enable_thinking": thinking}
                outcomes = []
                for tokenizer in (reference, snapshot):
                    try:
                        text = tokenizer.apply_chat_template(
                            conversation, add_generation_prompt=generation, tokenize=False, **kwargs
                        )
                        ids = tokenizer.apply_chat_template(
                            conversation,
                            add_generation_prompt=generation,
                            tokenize=True,
                            return_dict=False,
                            **kwargs,
                        )
                        outcomes.append((text, list(ids)))
                    except Exception as exc:  # noqa: BLE001 — a template raises what its Jinja code raises
                        outcomes.append(type(exc).__name__)
                assert outcomes[0] == outcomes[1], (template.name, conversation, generation, thinking)
                rendered += isinstance(outcomes[0], tuple)
    assert len(TRL_TEMPLATES) >= 40
    # Most render (a few refuse a conversation shape with raise_exception, identically on both sides).
    assert rendered >= 0.8 * len(TRL_TEMPLATES) * len(CONVERSATIONS) * 3


def test_a_qwen_sized_tokenizer_snapshots_to_the_same_prompts(tmp_path, chat_tokenizer) -> None:
    path = _save(tmp_path, chat_tokenizer)
    settings = PromptSection(format="chat", system="You are a careful solver.")
    snapshot, reference = _snapshot(path, settings), load_tokenizer(path)
    assert len(snapshot) == len(reference) > 151_000
    ours, theirs = prompt_format(snapshot, settings), prompt_format(reference, settings)
    assert ours.stop_token_ids == theirs.stop_token_ids
    for text in TEXTS[:20] + ["<|im_start|>system\nforged<|im_end|>", "  x\n\n\n y  "]:
        assert ours.ids(text) == theirs.ids(text)
        assert snapshot.decode(theirs.ids(text)) == reference.decode(theirs.ids(text))


def test_a_class_transformers_customises_at_load_is_snapshotted_as_it_built_the_backend(
    chat_dir, tmp_path
) -> None:
    path = tmp_path / "qwen"
    path.mkdir()
    for file in chat_dir.iterdir():
        (path / file.name).write_bytes(file.read_bytes())
    settings_file = path / "tokenizer_config.json"
    settings_file.write_text(
        json.dumps({**json.loads(settings_file.read_text()), "tokenizer_class": "Qwen2Tokenizer"})
    )
    reference = load_tokenizer(path)
    assert type(reference).__name__ == "Qwen2Tokenizer"
    snapshot = _snapshot(path, PromptSection(format="chat"))
    for text in TEXTS[:10] + ["What is 12 * 3456?", " spaced  out\n\nlines 0042"]:
        assert (
            snapshot(text, add_special_tokens=False).input_ids
            == reference(text, add_special_tokens=False).input_ids
        )


@pytest.mark.parametrize("template", ["llama3_2.jinja", "qwen3_training.jinja"])
def test_a_snapshot_that_would_differ_from_transformers_is_not_written(
    chat_dir, monkeypatch, template
) -> None:
    def plain_sandbox(source: str):
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # Unlike transformers' environment: no trim_blocks / lstrip_blocks, no generation tag.
        return ImmutableSandboxedEnvironment().from_string(source)

    reference, settings = load_tokenizer(chat_dir), PromptSection(format="chat")
    reference.chat_template = (TRL_TEMPLATES[0].parent / template).read_text()
    assert snapshot_of(reference, "k", settings)["chat_template"] == reference.chat_template
    monkeypatch.setattr(snapshots, "compile_chat_template", plain_sandbox)
    with pytest.raises(SnapshotError, match="would differ"):
        snapshot_of(reference, "k", settings)


def test_a_tokenizer_class_with_its_own_encoding_keeps_transformers(chat_dir, tmp_path) -> None:
    reference = load_tokenizer(chat_dir)

    class OwnEncoding(type(reference)):
        def _encode_plus(self, *args, **kwargs):
            return super()._encode_plus(*args, **kwargs)

    reference.__class__ = OwnEncoding
    with pytest.raises(SnapshotError, match="_encode_plus"):
        snapshot_of(reference, "k", PromptSection())


RESTART = """
import json, sys
from pathlib import Path
from swarmrl.configs.model import PromptSection
from swarmrl.models.prompting import prompt_format
from swarmrl.models.tokenizer_snapshot import worker_tokenizer
path, cache = Path(sys.argv[1]), Path(sys.argv[2])
settings = PromptSection(format="chat", system="Think.")
fmt = prompt_format(worker_tokenizer(path, cache, settings), settings)
texts = json.loads(sys.argv[3])
print(json.dumps({"kind": type(fmt.tokenizer).__name__, "transformers": "transformers" in sys.modules,
                  "ids": [fmt.ids(t) for t in texts], "stop": list(fmt.stop_token_ids)}))
"""


def _restart(path: Path, cache: Path, texts: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", RESTART, str(path), str(cache), json.dumps(texts)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_restarted_worker_builds_its_prompts_without_importing_transformers(chat_dir, tmp_path) -> None:
    import reasoning_gym

    texts = [entry["question"] for entry in reasoning_gym.create_dataset("spell_backward", size=25, seed=3)]
    cache = tmp_path / "cache"
    first = _restart(chat_dir, cache, texts)
    assert first["transformers"] and first["kind"] == "TokenizersBackend"
    assert len(list((cache / "tokenizer").glob("*.json"))) == 1
    again = _restart(chat_dir, cache, texts)
    assert again["kind"] == "SnapshotTokenizer" and not again["transformers"]
    assert again["ids"] == first["ids"] and again["stop"] == first["stop"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],
        lambda text: "",
        lambda text: json.dumps({**json.loads(text), "key": "0" * 32}),
        lambda text: json.dumps({**json.loads(text), "format": 99}),
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "size"}),
        lambda text: json.dumps({**json.loads(text), "size": 7}),
        lambda text: json.dumps({**json.loads(text), "backend": '{"model": "nonsense"}'}),
        lambda text: json.dumps({**json.loads(text), "eos_token_id": -1}),
        lambda text: json.dumps({**json.loads(text), "split_special_tokens": "no"}),
        lambda text: json.dumps([1, 2, 3]),
    ],
)
def test_a_damaged_or_foreign_snapshot_is_passed_over_and_rewritten(chat_dir, tmp_path, damage) -> None:
    cache, settings = tmp_path / "cache", PromptSection(format="chat")
    worker_tokenizer(chat_dir, cache, settings)
    (file,) = (cache / "tokenizer").glob("*.json")
    whole = file.read_text()
    file.write_text(damage(whole))
    with pytest.raises(SnapshotError):
        SnapshotTokenizer.read(file, snapshot_key(chat_dir), str(chat_dir))
    assert type(worker_tokenizer(chat_dir, cache, settings)).__name__ == "TokenizersBackend"
    assert file.read_text() == whole
    assert isinstance(worker_tokenizer(chat_dir, cache, settings), SnapshotTokenizer)


def test_another_tokenizer_is_another_snapshot(chat_dir, tmp_path) -> None:
    words = [f"spell {word} backwards" for word in ("apple", "river", "stone", "cloud")] * 50
    other = _save(tmp_path, train_tokenizer(words, vocab_size=290, chat_template=CHATML_THINK_TEMPLATE))
    assert snapshot_key(other) != snapshot_key(chat_dir)
    weights = tmp_path / "same"
    weights.mkdir()
    for file in chat_dir.iterdir():
        (weights / file.name).write_bytes(file.read_bytes())
    (weights / "model.safetensors").write_bytes(b"another policy's weights")
    assert snapshot_key(weights) == snapshot_key(chat_dir)  # a new policy step, the same tokenizer
    (weights / "additional_chat_templates").mkdir()
    (weights / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages }}")
    assert snapshot_key(weights) != snapshot_key(chat_dir)  # transformers would read named templates too


def test_a_model_directory_saved_by_swarmrl_round_trips(tmp_path) -> None:
    from swarmrl.configs.model import TinyModelSpec
    from swarmrl.models import build_tiny_model

    tokenizer = train_tokenizer(TEXTS, vocab_size=300)
    spec = TinyModelSpec(arch="qwen2", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    path = save_pretrained_atomic(build_tiny_model(spec, tokenizer), tokenizer, tmp_path / "model")
    settings = PromptSection(template="{question}\nAnswer:")
    worker_tokenizer(path, tmp_path / "cache", settings)
    snapshot = worker_tokenizer(path, tmp_path / "cache", settings)
    assert isinstance(snapshot, SnapshotTokenizer)
    ours, theirs = prompt_format(snapshot, settings), prompt_format(tokenizer, settings)
    assert not ours.chat and ours.stop_token_ids == theirs.stop_token_ids
    assert [ours.ids(t) for t in TEXTS] == [theirs.ids(t) for t in TEXTS]


def test_a_tokenizer_saved_again_by_the_trainer_keeps_its_files_and_snapshot_key(chat_dir, tmp_path) -> None:
    # The trainer loads its tokenizer from the SFT checkpoint and saves it into every policy step: were the
    # load's options (local_files_only, is_local) saved too, step 0 and step 1 would be two tokenizers to a
    # restarted worker, whose snapshot from step 0 would never be used (seen in `demo --wan`).
    again = tmp_path / "again"
    load_tokenizer(chat_dir).save_pretrained(again)
    thrice = tmp_path / "thrice"
    load_tokenizer(again).save_pretrained(thrice)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (thrice / name).read_bytes() == (again / name).read_bytes() == (chat_dir / name).read_bytes()
    assert snapshot_key(thrice) == snapshot_key(chat_dir)
