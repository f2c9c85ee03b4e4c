"""Where the answer is in a completion: after the reasoning, inside answer tags; the last python fence."""

from __future__ import annotations

import re

from swarmrl.configs.tasks import AnswerExtractionConfig

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def answer_text(completion: str, config: AnswerExtractionConfig) -> str | None:
    """The answer part of the completion exactly as written (not stripped), or None when the convention
    is not met. Math scoring reads this: math-verify's own patterns look at the whitespace around math."""
    text = completion
    if config.mode in ("think", "auto"):
        end = text.rfind(config.think_end_tag)
        if end >= 0:
            text = text[end + len(config.think_end_tag) :]
        elif config.require_think_end:
            return None
    if config.mode in ("answer_tag", "auto"):
        tagged = last_tag_content(text, config.answer_tag)
        if tagged is not None:
            return tagged
        if config.mode == "answer_tag":
            return None
    return text


def answer_region(completion: str, config: AnswerExtractionConfig) -> str | None:
    """`answer_text` without surrounding whitespace."""
    text = answer_text(completion, config)
    return None if text is None else text.strip()


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag> pair."""
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    open_ = text.rfind(f"<{tag}>", 0, close)
    if open_ < 0:
        return None
    return text[open_ + len(tag) + 2 : close]


def last_python_block(region: str) -> str | None:
    """The last fenced code block tagged python/py (or untagged); None when there is none."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(region)]
    for lang, body in reversed(blocks):
        if lang in ("python", "py", "python3", ""):
            return body
    return None
