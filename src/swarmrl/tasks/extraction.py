"""Where the answer is in a completion: after the reasoning, inside answer tags; the last python fence."""

from __future__ import annotations

import re

from swarmrl.configs.tasks import AnswerExtractionConfig

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def answer_text(
    completion: str, config: AnswerExtractionConfig, accept_unclosed_think: bool = False
) -> str | None:
    """The answer part of the completion exactly as written (not stripped), or None when the convention
    is not met. Math scoring reads this: math-verify's own patterns look at the whitespace around math.

    A reasoning block opened (`<think>`) and never closed holds no answer: the completion stopped mid-thought,
    and rewarding a number found in unfinished reasoning teaches the policy to stop thinking early. A task
    may opt in to reading it anyway (`accept_unclosed_think`); a completion with no think tags at all is
    answer text throughout, unless `require_think_end`."""
    text = completion
    if config.mode in ("think", "auto"):
        end = text.rfind(config.think_end_tag)
        if end >= 0:
            text = text[end + len(config.think_end_tag) :]
        elif config.require_think_end:
            return None
        elif think_start_tag(config) in text and not accept_unclosed_think:
            return None
    if config.mode in ("answer_tag", "auto"):
        tagged = last_tag_content(text, config.answer_tag)
        if tagged is not None:
            return tagged
        if config.mode == "answer_tag":
            return None
    return text


def answer_region(
    completion: str, config: AnswerExtractionConfig, accept_unclosed_think: bool = False
) -> str | None:
    """`answer_text` without surrounding whitespace."""
    text = answer_text(completion, config, accept_unclosed_think)
    return None if text is None else text.strip()


def think_start_tag(config: AnswerExtractionConfig) -> str:
    """The tag that opens the reasoning: "<think>" for "</think>"."""
    return config.think_end_tag.replace("</", "<", 1)


def accepts_unclosed_think(info: dict) -> bool:
    """A task's opt-in (`verification_info.accept_unclosed_think`) to reading an unclosed reasoning block."""
    return info.get("accept_unclosed_think") is True


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
