"""Math verdicts on gold answers as the datasets write them: swarmrl against three references, and the truth.

Corpus: benchmarks/data/math_gold_corpus.jsonl — gold answers in the conventions of MATH (escaped dollars,
`\\text{}` units, `^\\circ`, `\\%`, `,\\!` thousands, lettered choices), NuminaMath (LaTeX-spaced thousands,
`\\textbf{(B)}\\ 12`, sets, `\\pm`), DeepScaleR (bare LaTeX, near-miss integers) and GSM8K (plain integers, the
whole `... #### 72` answer field), each with completions that are right in the dataset's own style, right in
another style, wrong, or a near miss; `correct` is the hand label.

Graders, all offline:
- swarmrl: `verify_math`, the math reward's own comparison (called in this process).
- math-verify alone: `verify(parse(gold), parse(completion))` on the texts as given, with the reward's
  extraction settings (LaTeX with \\boxed{} first, then expressions; float_rounding 6); and the same with the
  gold wrapped in $...$ (what a user of the library would try first with bare-LaTeX golds).
- Qwen2.5-Math's grader: its published rule, reimplemented here (`qwen_grade`): the last \\boxed{} (else
  "the answer is", else the last number), its `strip_string`, then `math_equal` — case-insensitive string
  match, numbers within relative 1e-4 (the gold also read as x/100 and x*100), bracketed parts one by one,
  equations, sympy simplification.
- lighteval's `math_normalizer` (Hendrycks MATH's `is_equiv`): its published rule, reimplemented here
  (`hendrycks_grade`): the last \\boxed{}, `strip_string`, exact string equality.

Prints each grader's agreement with the labels, overall and per source, then every case where a grader and
the label differ.

    PYTHONPATH=src .venv/bin/python benchmarks/math_gold_agreement.py
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from math import isclose
from pathlib import Path

from latex2sympy2_extended import latex2sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import N, simplify
from sympy.parsing.sympy_parser import parse_expr

from swarmrl.tasks.math_verifier import verify_math

CORPUS = Path(__file__).resolve().parent / "data" / "math_gold_corpus.jsonl"


def swarmrl_grade(gold: str, completion: str) -> bool:
    return verify_math(completion, [gold])


def math_verify_wrapped_grade(gold: str, completion: str) -> bool:
    return math_verify_grade(f"${gold}$", completion)


def math_verify_grade(gold: str, completion: str) -> bool:
    configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return verify(
        parse(gold, configs, parsing_timeout=None),
        parse(completion, configs, parsing_timeout=None),
        float_rounding=6,
        timeout_seconds=None,
    )


# ---- Hendrycks MATH / lighteval math_normalizer: the rule, reimplemented ---------------------------------


def last_boxed(text: str) -> str | None:
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    opening = text.find("{", start)
    if opening < 0:
        return text[start:].split(" ", 1)[-1].split("$")[0]
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[opening + 1 : index]
    return None


def fix_fracs(text: str) -> str:
    """\\frac12 and \\frac1{2} as \\frac{1}{2}."""
    return re.sub(r"\\frac(?:\{([^{}]*)\}|(\w))(?:\{([^{}]*)\}|(\w))", _frac, text)


def _frac(match: re.Match) -> str:
    top = match.group(1) if match.group(1) is not None else match.group(2)
    bottom = match.group(3) if match.group(3) is not None else match.group(4)
    return f"\\frac{{{top}}}{{{bottom}}}"


def hendrycks_strip(text: str) -> str:
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac")):
        text = text.replace(old, new)
    for old in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$"):
        text = text.replace(old, "")
    if "\\text{ " in text:  # units on the right
        text = text.split("\\text{ ")[0]
    text = text.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    text = finish_strip(text, r"\\sqrt(\w)")
    return "\\frac{1}{2}" if text == "0.5" else text


def finish_strip(text: str, sqrt_argument: str) -> str:
    """The end both references' strip_string share: a leading "." gets its 0, a short left side of "=" goes,
    \\sqrt and \\frac get their braces, spaces go, an integer ratio a/b becomes \\frac{a}{b}."""
    if text.startswith("."):
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        text = sides[1]
    text = fix_fracs(re.sub(sqrt_argument, r"\\sqrt{\1}", text).replace(" ", ""))
    if re.fullmatch(r"-?\d+/\d+", text):
        top, bottom = text.split("/")
        text = f"\\frac{{{top}}}{{{bottom}}}"
    return text


def hendrycks_grade(gold: str, completion: str) -> bool:
    answer = last_boxed(completion)
    gold_answer = last_boxed(gold) if "\\boxed" in gold else gold
    if answer is None or gold_answer is None:
        return False
    return hendrycks_strip(answer) == hendrycks_strip(gold_answer)


# ---- Qwen2.5-Math's grader: the rule, reimplemented ----------------------------------------------------


def qwen_extract(completion: str) -> str:
    if "boxed" in completion:
        answer = last_boxed(completion) or ""
    elif "the answer is" in completion:
        tail = completion.split("the answer is")[-1].strip().split("\n")[0].lstrip(" :")
        number = re.match(r"\$?(-?\d[\d,]*\.?\d*)", tail)
        answer = number.group(1).replace(",", "") if number else tail
    else:
        numbers = re.findall(r"-?\d*\.?\d+", completion.replace(",", ""))
        answer = numbers[-1] if numbers else ""
    return qwen_strip(answer.strip().lstrip(":").rstrip("./"))


def qwen_strip(text: str) -> str:
    text = text.strip().replace("\n", "").rstrip(".").replace("\\!", "")
    text = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", text).replace(
        "\\end{array}", "\\end{pmatrix}"
    )
    for old, new in (("bmatrix", "pmatrix"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\neq", "\\ne")):
        text = text.replace(old, new)
    for old, new in (("\\leq", "\\le"), ("\\geq", "\\ge"), ("\\left", ""), ("\\right", "")):
        text = text.replace(old, new)
    text = text.replace("\\{", "{").replace("\\}", "}")
    without_unit = re.sub(r"\\text\{.*?\}$", "", text).strip()
    if without_unit and without_unit != text:
        text = without_unit
    for old in ("^{\\circ}", "^\\circ", "\\$", "$", "\\(", "\\)", "\\%", "%", "\\mathbf"):
        text = text.replace(old, "")
    text = re.sub(r"\\text\{(.*?)\}", r"\1", text)
    text = re.sub(r"\\mbox\{.*?\}", "", text)
    for prefix in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in"):
        text = text.replace(prefix, "")
    text = text.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}").replace("and", "")
    text = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", text)
    text = re.sub(r"(\d+)\.0*$", r"\1", text)
    return finish_strip(text, r"\\sqrt(\w+)")


def qwen_number(text: str) -> float | None:
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        pass
    if text.endswith("%"):
        try:
            return float(text[:-1].rstrip("\\")) / 100
        except ValueError:
            return None
    return None


def qwen_symbolic(a: str, b: str) -> bool:
    def read(text: str):
        for reader in (latex2sympy, parse_expr):
            try:
                return reader(text)
            except Exception:  # noqa: BLE001, S112 — the reference tries each reader in turn
                continue
        return text

    left, right = read(a), read(b)
    checks = (
        lambda: str(left) == str(right) or left == right,
        lambda: simplify(left - right) == 0,
        lambda: isclose(float(N(left)), float(N(right)), rel_tol=1e-4),
    )
    for check in checks:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001, S112 — as the reference: a check that fails is no match
            continue
    return False


def qwen_equal(prediction: str, reference: str) -> bool:
    if prediction.strip().lower() == reference.strip().lower():
        return True
    predicted, expected = qwen_number(prediction), qwen_number(reference)
    if predicted is not None and expected is not None:
        return any(
            isclose(predicted, value, rel_tol=1e-4) for value in (expected / 100, expected, expected * 100)
        )
    if not prediction:
        return False
    bare = [re.sub(r"[{}()]", "", text.strip("[]()")) for text in (prediction, reference)]
    if bare[0].lower() == bare[1].lower():
        return True
    brackets = r"[(\[].+[)\]]"
    if re.fullmatch(brackets, prediction) and re.fullmatch(brackets, reference):
        parts = prediction[1:-1].split(","), reference[1:-1].split(",")
        if len(parts[0]) == len(parts[1]) and all(qwen_equal(p, r) for p, r in zip(*parts, strict=True)):
            return True
    if prediction.count("=") == 1 and reference.count("=") == 1:
        left, right = (f"{s.split('=')[0]}-({s.split('=')[1]})" for s in (prediction, reference))
        if qwen_symbolic(left, right) or qwen_symbolic(f"-({left})", right):
            return True
    return qwen_symbolic(prediction, reference)


def qwen_grade(gold: str, completion: str) -> bool:
    return qwen_equal(qwen_extract(completion), qwen_strip(last_boxed(gold) if "\\boxed" in gold else gold))


GRADERS: dict[str, Callable[[str, str], bool]] = {
    "swarmrl": swarmrl_grade,
    "math-verify alone": math_verify_grade,
    "math-verify, gold in $...$": math_verify_wrapped_grade,
    "Qwen2.5-Math rule": qwen_grade,
    "lighteval/MATH rule": hendrycks_grade,
}


def verdict(grader: Callable[[str, str], bool], gold: str, completion: str) -> bool:
    try:
        return bool(grader(gold, completion))
    except Exception:  # noqa: BLE001 — a grader that crashes on a case has not accepted it
        return False


def main() -> None:
    logging.disable(logging.WARNING)
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    sources = sorted({row["source"] for row in rows})
    verdicts = {
        name: [verdict(grader, r["gold"], r["completion"]) for r in rows] for name, grader in GRADERS.items()
    }
    print(
        f"{len(rows)} cases ({sum(r['correct'] for r in rows)} right answers), sources: {', '.join(sources)}"
    )
    print(f"| grader | agree | false accepts | false rejects | {' | '.join(sources)} |")
    print("|---|---|---|---|" + "---|" * len(sources))
    for name, given in verdicts.items():
        agree = sum(v == r["correct"] for v, r in zip(given, rows, strict=True))
        false_accepts = sum(v and not r["correct"] for v, r in zip(given, rows, strict=True))
        false_rejects = sum(r["correct"] and not v for v, r in zip(given, rows, strict=True))
        per_source = []
        for source in sources:
            mine = [v == r["correct"] for v, r in zip(given, rows, strict=True) if r["source"] == source]
            per_source.append(f"{sum(mine)}/{len(mine)}")
        print(
            f"| {name} | {agree}/{len(rows)} | {false_accepts} | {false_rejects} | {' | '.join(per_source)} |"
        )
    print("\nDisagreements with the label (1 = accepted):")
    print(f"| id | gold | completion | label | {' | '.join(GRADERS)} |")
    print("|---|---|---|---|" + "---|" * len(GRADERS))
    for index, row in enumerate(rows):
        given = [verdicts[name][index] for name in GRADERS]
        if any(v != row["correct"] for v in given):
            cells = " | ".join(str(int(v)) for v in given)
            print(
                f"| {row['id']} | `{row['gold']!r}` | `{row['completion']!r}` | {int(row['correct'])} | {cells} |"
            )


if __name__ == "__main__":
    main()
