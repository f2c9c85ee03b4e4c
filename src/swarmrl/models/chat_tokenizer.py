"""A Qwen-sized byte-level BPE tokenizer with a ChatML chat template, trained offline and shipped.

Qwen2.5/Qwen3 tokenizers hold 151,643 byte-level BPE tokens followed by their special tokens (151,669 in
Qwen3, inside a 151,936-row embedding). Reaching that many merges needs a large, varied corpus, and nothing
may be downloaded: the corpus is every Python, reStructuredText, Markdown and plain-text file of the local
Python installation (the standard library and site-packages: a few hundred MB of code and documentation in
many styles and several natural languages), read in sorted path order. Pre-tokenisation is Qwen's own split
pattern (letters, single digits, punctuation runs, newlines, spaces) then GPT-2's byte-to-unicode map, so the
merges are trained the way Qwen's were, on different text. The regular vocabulary is asked for at exactly
151,643 entries; the trainer stops early only if the corpus supports fewer merges (`build` says so). Special
tokens follow in Qwen3's order, so <|endoftext|> = 151643, <|im_start|> = 151644, <|im_end|> = 151645.

    python -m swarmrl.models.chat_tokenizer build [--max-mb 150]     # writes the shipped tokenizer

The shipped file is gzipped tokenizer.json; `load_chat_tokenizer()` reads it (no network, ~1 s).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SHIPPED = Path(__file__).parent / "shapes" / "chat_tokenizer.json.gz"
REGULAR_TOKENS = 151_643
# Qwen2's split pattern (tokenizer.json of every Qwen2.5/Qwen3 model).
SPLIT_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_SUFFIXES = (".py", ".rst", ".md", ".txt")


def corpus_files(roots: list[Path] | None = None) -> list[Path]:
    """Text files of the local Python installation, in a fixed order."""
    roots = roots or sorted({Path(sysconfig.get_paths()[key]) for key in ("stdlib", "purelib", "platlib")})
    files = {
        path for root in roots for path in root.rglob("*") if path.suffix in _SUFFIXES and path.is_file()
    }
    return sorted(files)


def corpus_texts(files: list[Path], max_bytes: int) -> Iterator[str]:
    used = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if used + len(text) > max_bytes:
            return
        used += len(text)
        yield text


def train_chat_tokenizer(
    texts: Iterator[str], regular_tokens: int = REGULAR_TOKENS, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=regular_tokens,
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tokenizer)


def load_chat_tokenizer(path: Path = SHIPPED) -> PreTrainedTokenizerFast:
    """The shipped Qwen-sized tokenizer (regular tokens, then Qwen3's special tokens) with a ChatML template."""
    return _wrap(Tokenizer.from_str(gzip.decompress(path.read_bytes()).decode("utf-8")))


def _wrap(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train and write the shipped Qwen-sized tokenizer")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--max-mb", type=float, default=150.0, help="corpus size cap")
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    started = time.monotonic()
    files = corpus_files()
    tokenizer = train_chat_tokenizer(corpus_texts(files, int(args.max_mb * 2**20)))
    regular = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(gzip.compress(tokenizer.backend_tokenizer.to_str().encode("utf-8"), mtime=0))
    print(
        f"{len(files)} corpus files, {regular} regular + {len(SPECIAL_TOKENS)} special tokens "
        f"({len(tokenizer)} in all) in {time.monotonic() - started:.0f} s -> {args.out}"
    )
    if regular < REGULAR_TOKENS:
        print(f"the corpus supported only {regular} of {REGULAR_TOKENS} regular tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
