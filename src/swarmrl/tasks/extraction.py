"""Pull the final answer out of a completion: after the reasoning, answer tags, \\boxed{...}, fences."""

from __future__ import annotations

import re

from swarmrl.tasks.config import AnswerExtractionConfig

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_BRACES = re.compile(r"\\(?:boxed|fbox)\s*\{|\{|\}")
_ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:=]\s*(.+)", re.IGNORECASE)


def answer_region(completion: str, config: AnswerExtractionConfig) -> str | None:
    """The part of the completion that holds the answer, or None when the convention is not met."""
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
            return tagged.strip()
        if config.mode == "answer_tag":
            return None
    return text.strip()


def last_tag_content(text: str, tag: str) -> str | None:
    """Content of the last complete <tag>...</tag> pair."""
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    open_ = text.rfind(f"<{tag}>", 0, close)
    if open_ < 0:
        return None
    return text[open_ + len(tag) + 2 : close]


def last_boxed(text: str) -> str | None:
    r"""Content of the last \boxed{...} (or \fbox{...}), honouring nested braces; None if absent.

    One pass with a stack of open braces, so hostile input (thousands of unclosed \boxed{) stays linear.
    """
    stack: list[int] = []  # content start for a \boxed{ brace, -1 for a plain brace
    best: tuple[int, int] | None = None
    for match in _BRACES.finditer(text):
        token = match.group()
        if token == "}":
            if stack:
                opened = stack.pop()
                if opened >= 0 and (best is None or opened > best[0]):
                    best = (opened, match.start())
        else:
            stack.append(match.end() if token != "{" else -1)
    return None if best is None else text[best[0] : best[1]]


def final_math_answer(region: str) -> str:
    r"""The answer expression: \boxed{...} if any, else an 'Answer:' line, else the last non-empty line."""
    boxed = last_boxed(region)
    if boxed is not None:
        return boxed.strip()
    lines = [line.strip() for line in region.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        match = _ANSWER_LINE.search(line)
        if match:
            return match.group(1).strip().rstrip(".")
    return lines[-1] if lines else ""


def last_python_block(region: str) -> str | None:
    """The last fenced code block tagged python/py (or untagged); None when there is none."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(region)]
    for lang, body in reversed(blocks):
        if lang in ("python", "py", "python3", ""):
            return body
    return None
