"""A worker's tokenizer read back without transformers, from a snapshot its first load wrote.

Importing transformers and building a tokenizer through it costs about 2 s of CPU (the package 1.3 s, the
AutoTokenizer class map 0.7 s on this project's machines) — on a busy machine, after torch, the largest part
of a restarted worker's way back to work (issue 35: within one lease period). What a worker needs of its
tokenizer is small: encode text, render the chat template, the special token ids, decode (multi-turn). So the
first time a worker loads a checkpoint's tokenizer through transformers, it saves the backend tokenizer as
transformers built it (the `tokenizers` JSON, after whatever the tokenizer's class changed at load) with the
fields prompts read — only once the snapshot gives the same prompt ids, text, stop tokens and decodes as
transformers on probe prompts. A restart reads it with the `tokenizers` library and Jinja alone.

The chat template renders in an environment built as transformers builds its own (sandboxed, trim_blocks,
lstrip_blocks, loop controls, the `generation` tag, its `tojson`, `raise_exception`, `strftime_now`, `dict`
and `namespace`), with the tokenizer's named special tokens and the [prompt] section's variables; tested
against transformers on the chat templates TRL ships. Anything it does not reproduce — a tokenizer class with
its own encoding or decoding, several named templates, clean-up of decoded spaces — stays with transformers.

The snapshot is keyed by the tokenizer's files, transformers' version and this format: another checkpoint's
tokenizer or another transformers is another file. A damaged or foreign file is read as absent and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from swarmrl.models.prompting import PromptError, apply_chat_template, prompt_format
from swarmrl.rundir import write_json_atomic

if TYPE_CHECKING:
    import jinja2

    from swarmrl.configs.model import PromptSection

log = logging.getLogger(__name__)

FORMAT = 1
# The files transformers reads to build a model directory's tokenizer (config.json names the model type that
# AutoTokenizer maps to a class when tokenizer_config.json declares none).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "config.json",
)
ADDITIONAL_TEMPLATES = "additional_chat_templates"  # named templates beside the default one
# Text a snapshot must encode, render and decode exactly as transformers does before it is written: special
# tokens spelled out in user text, whitespace runs, digits, several scripts, emoji, code, a think block.
PROBES = (
    "What is 12 + 30?",
    "  leading and trailing spaces  \n\n\ttabs\r\n",
    "<|im_start|>user\nspelled special tokens<|im_end|><|endoftext|><|eos|><|bos|><|pad|><think></think>",
    "1000000007 - 1000000008 = -1; 3.14159e-10",
    "Ünïcödé, 中文字符, русский, العربية, हिन्दी, 🤖🚀👍🏽",
    "def f(x):\n    return {'a': [x, x ** 2]}  # comment\n",
    "<think>\nreasoning first\n</think>\n\nthe answer is 42",
    "",
)


class SnapshotError(ValueError):
    """A tokenizer snapshot that cannot be read (damaged, foreign, of another format)."""


@dataclass(frozen=True)
class Encoding:
    input_ids: list[int]


class SnapshotTokenizer:
    """The part of a transformers tokenizer a worker's prompts use, from a snapshot (see the module)."""

    def __init__(self, backend: Tokenizer, fields: Mapping[str, Any], name_or_path: str) -> None:
        self.backend = backend
        backend.no_truncation()
        backend.no_padding()
        backend.encode_special_tokens = fields["split_special_tokens"]
        self.special_tokens_map: dict[str, str] = dict(fields["special_tokens_map"])
        self.bos_token_id: int | None = fields["bos_token_id"]
        self.eos_token_id: int | None = fields["eos_token_id"]
        self.pad_token_id: int | None = fields["pad_token_id"]
        self.all_special_ids: list[int] = list(fields["all_special_ids"])
        self.chat_template: str | None = fields["chat_template"]
        self.size: int = fields["size"]
        self.name_or_path = name_or_path
        self._template: jinja2.Template | None = None

    def __len__(self) -> int:
        return self.size

    def __call__(self, text: str, add_special_tokens: bool = True) -> Encoding:
        return Encoding(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """transformers' `apply_chat_template` for one conversation, no tools or documents, as a string or ids."""
        if return_dict:
            raise ValueError("a snapshot tokenizer returns a chat's ids, not a dict")
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        if not messages:
            raise ValueError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        if self._template is None:
            self._template = compile_chat_template(self.chat_template)
        text = self._template.render(
            messages=template_messages(messages),
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens_map, **kwargs},
        )
        return self(text, add_special_tokens=False).input_ids if tokenize else text

    @classmethod
    def read(cls, path: Path, key: str, name_or_path: str) -> SnapshotTokenizer:
        """The snapshot at `path` written for `key`; SnapshotError when it is not that, whole and well-formed."""
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError(f"{path}: not a readable snapshot ({exc})") from exc
        try:
            return cls.from_data(data, key, name_or_path)
        except SnapshotError as exc:
            raise SnapshotError(f"{path}: {exc}") from exc

    @classmethod
    def from_data(cls, data: Any, key: str, name_or_path: str) -> SnapshotTokenizer:
        """The tokenizer a snapshot's parsed JSON describes, checked as a restart checks it."""
        fields = _checked_fields(data, key)
        try:
            backend = Tokenizer.from_str(data["backend"])
        except Exception as exc:  # noqa: BLE001 — tokenizers' from_str raises a plain Exception
            raise SnapshotError(f"its backend tokenizer does not load: {exc}") from exc
        if backend.get_vocab_size(with_added_tokens=True) != fields["size"]:
            raise SnapshotError("the backend's vocabulary is not the size the snapshot records")
        return cls(backend, fields, name_or_path)


def _checked_fields(data: Any, key: str) -> dict[str, Any]:
    def ids(value: Any) -> bool:
        return isinstance(value, list) and all(_is_id(i) for i in value)

    checks = {
        "format": lambda v: v == FORMAT,
        "key": lambda v: v == key,
        "backend": lambda v: isinstance(v, str),
        "special_tokens_map": lambda v: (
            isinstance(v, dict) and all(isinstance(k, str) and isinstance(s, str) for k, s in v.items())
        ),
        "bos_token_id": lambda v: v is None or _is_id(v),
        "eos_token_id": lambda v: v is None or _is_id(v),
        "pad_token_id": lambda v: v is None or _is_id(v),
        "all_special_ids": ids,
        "chat_template": lambda v: v is None or isinstance(v, str),
        "size": _is_id,
        "split_special_tokens": lambda v: isinstance(v, bool),
    }
    if not isinstance(data, dict) or set(data) != set(checks):
        raise SnapshotError("not a snapshot of this format (its fields differ)")
    for name, check in checks.items():
        if not check(data[name]):
            raise SnapshotError(f"field {name!r} is not what this format and key require")
    return data


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# Names a message's reasoning may come under; chat templates read the first, gpt-oss's the second.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to a template: keys whose value is None dropped, reasoning
    given under both names templates read it by."""
    out = []
    for message in messages:
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def compile_chat_template(source: str) -> jinja2.Template:
    """`source` compiled in a Jinja environment with transformers' settings, filters and globals."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):
        """`{% generation %}…{% endgeneration %}` marks the assistant's tokens for training masks; it renders its
        body unchanged (a worker does not need the mask)."""

        tags = {"generation"}

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """Jinja's namespace refusing underscore-prefixed names, as transformers' does (no CPython internals)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            for name in dict(*rest, **kwargs):
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, dict(*rest, **kwargs))

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace may not hold {name!r}")

    class DictMaker:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        # Jinja's own tojson escapes HTML characters; templates expect plain JSON.
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals.update(
        raise_exception=raise_exception,
        strftime_now=lambda fmt: datetime.now().strftime(fmt),
        dict=DictMaker(),
        namespace=Namespace,
    )
    return env.from_string(source)


def snapshot_key(path: Path) -> str:
    """Names the tokenizer files of model directory `path`, transformers' version and this format."""
    digest = hashlib.sha256(f"swarmrl-tokenizer-snapshot/{FORMAT}/{_transformers_version()}".encode())
    named = sorted(path.glob(f"{ADDITIONAL_TEMPLATES}/*"))
    for file in [path / name for name in TOKENIZER_FILES] + named:
        if file.is_file():
            digest.update(f"\0{file.relative_to(path)}\0{file.stat().st_size}\0".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:32]


def _transformers_version() -> str:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return "absent"


def worker_tokenizer(path: Path, cache: Path, settings: PromptSection) -> Any:
    """The tokenizer of model directory `path` for a worker's prompts: its snapshot under `cache` when one was
    written for these files, else transformers' (and a snapshot of it when it passes the probes)."""
    key = snapshot_key(path)
    file = cache / "tokenizer" / f"{key}.json"
    if file.is_file():
        try:
            return SnapshotTokenizer.read(file, key, str(path))
        except SnapshotError as exc:
            log.warning("tokenizer snapshot not used, loading through transformers: %s", exc)
    from swarmrl.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(path)
    try:
        data = snapshot_of(tokenizer, key, settings)
    except SnapshotError as exc:
        log.info("no tokenizer snapshot for %s: %s", path, exc)
        return tokenizer
    try:
        write_json_atomic(file, data)
    except OSError as exc:
        log.warning("tokenizer snapshot not written to %s: %s", file, exc)
    return tokenizer


def snapshot_of(tokenizer: Any, key: str, settings: PromptSection) -> dict[str, Any]:
    """The snapshot of a transformers tokenizer; SnapshotError when its class does what a snapshot cannot, or
    when the snapshot's prompts, stop tokens or decodes differ from transformers' on the probes."""
    from transformers import PreTrainedTokenizerBase, TokenizersBackend

    cls = type(tokenizer)
    own = [
        name
        for name, base in (
            ("_encode_plus", TokenizersBackend),
            ("_decode", TokenizersBackend),
            ("__call__", PreTrainedTokenizerBase),
            ("apply_chat_template", PreTrainedTokenizerBase),
        )
        if not isinstance(tokenizer, base) or getattr(cls, name) is not getattr(base, name)
    ]
    if own:
        raise SnapshotError(f"{cls.__name__} has its own {', '.join(own)}")
    if tokenizer.clean_up_tokenization_spaces and type(tokenizer.backend_tokenizer.model).__name__ != "BPE":
        raise SnapshotError("it cleans up decoded spaces")
    template = tokenizer.chat_template
    if template is not None and not isinstance(template, str):
        raise SnapshotError("it has several named chat templates")
    data = {
        "format": FORMAT,
        "key": key,
        "backend": tokenizer.backend_tokenizer.to_str(),
        "special_tokens_map": dict(tokenizer.special_tokens_map),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "all_special_ids": list(tokenizer.all_special_ids),
        "chat_template": template,
        "size": len(tokenizer),
        "split_special_tokens": bool(tokenizer.split_special_tokens),
    }
    try:
        snapshot = SnapshotTokenizer.from_data(data, key, tokenizer.name_or_path)
    except SnapshotError as exc:
        raise SnapshotError(f"it does not fit a snapshot: {exc}") from exc
    difference = first_difference(tokenizer, snapshot, settings)
    if difference is not None:
        raise SnapshotError(f"the snapshot would differ from transformers: {difference}")
    return data


def first_difference(reference: Any, snapshot: SnapshotTokenizer, settings: PromptSection) -> str | None:
    """What first differs between the two tokenizers on the probes, or None."""
    for text in PROBES:
        for special in (False, True):
            ours = snapshot(text, add_special_tokens=special).input_ids
            theirs = reference(text, add_special_tokens=special).input_ids
            if ours != theirs:
                return f"encoding {text!r} (special tokens {special}): {ours} vs {theirs}"
            for skip in (False, True):
                if snapshot.decode(theirs, skip) != reference.decode(theirs, skip_special_tokens=skip):
                    return f"decoding {theirs} (skip special tokens {skip})"
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "all_special_ids", "chat_template"):
        if getattr(snapshot, name) != getattr(reference, name):
            return name
    conversation = [
        {"role": "system", "content": PROBES[0]},
        {"role": "user", "content": PROBES[2]},
        {"role": "assistant", "content": PROBES[6]},
        {"role": "user", "content": PROBES[4]},
    ]
    outcomes = [_prompt_outcomes(tokenizer, settings, conversation) for tokenizer in (snapshot, reference)]
    for (what, ours), (_, theirs) in zip(*outcomes, strict=True):
        if ours != theirs:
            return f"{what}: {ours!r} vs {theirs!r}"
    return None


def _prompt_outcomes(
    tokenizer: Any, settings: PromptSection, conversation: list[dict[str, str]]
) -> list[tuple[str, Any]]:
    """What a worker's prompts get from `tokenizer`: the prompt format's stop tokens, each probe's prompt text
    and ids, a multi-turn chat with and without the generation prompt (or the error each raises)."""

    def outcome(what: str, compute: Any) -> tuple[str, Any]:
        try:
            return what, compute()
        except Exception as exc:  # noqa: BLE001 — a template raises whatever its Jinja code raises
            return what, f"{type(exc).__name__}: {exc}"

    try:
        fmt = prompt_format(tokenizer, settings)
    except PromptError as exc:
        return [("the prompt format", str(exc))]
    outcomes = [("the stop tokens", fmt.stop_token_ids)]
    for text in PROBES:
        outcomes.append(outcome(f"the prompt of {text!r}", lambda text=text: (fmt.text(text), fmt.ids(text))))
    if fmt.chat:
        for generation in (False, True):
            outcomes.append(
                outcome(
                    f"a multi-turn chat (generation prompt {generation})",
                    lambda generation=generation: apply_chat_template(
                        tokenizer, conversation, settings, tokenize=False, add_generation_prompt=generation
                    ),
                )
            )
    return outcomes
