"""Regenerate math_verify_suite.json from a checkout of huggingface/Math-Verify (Apache-2.0).

Reads the parametrized (gold, pred, expected) cases of its tests/ by AST (nothing is imported or run) and
records with each the settings its test compares under. Usage:
    python extract_math_verify_suite.py MATH_VERIFY_CHECKOUT COMMIT > math_verify_suite.json
"""

from __future__ import annotations

import ast
import json
import math
import pathlib
import sys

FILES = (
    "test_all.py",
    "test_boxed.py",
    "test_numina_cases.py",
    "test_open_thoughts.py",
    "test_yujianll.py",
    "test_strict.py",
)
DEFAULT_SETTINGS = {
    "match_types": ["latex", "expr"],
    "precision": 6,
    "strict": True,
    "allow_set_relation_comp": False,
}


def test_settings(fn: ast.FunctionDef) -> dict:
    """Keyword arguments of the test's compare_strings call (test_yujianll calls parse/verify bare)."""
    settings = dict(DEFAULT_SETTINGS)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "compare_strings":
            for kw in node.keywords:
                if isinstance(kw.value, ast.Constant | ast.List):
                    settings[kw.arg] = ast.literal_eval(kw.value)
    return settings


def cases_of(path: pathlib.Path) -> list[dict]:
    cases = []
    for fn in ast.parse(path.read_text()).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        marks = [
            d
            for d in fn.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"
        ]
        if not marks:
            continue
        names = [n.strip() for n in ast.literal_eval(marks[0].args[0]).split(",")]
        settings = test_settings(fn)
        for i, elt in enumerate(marks[0].args[1].elts):
            try:
                values = ast.literal_eval(elt)
            except ValueError:  # f-strings over math.sqrt in test_float_precision
                values = eval(compile(ast.Expression(elt), str(path), "eval"), {"math": math})  # noqa: S307
            row = dict(zip(names, values, strict=True))
            expected = row.pop("expected", row.pop("result", None))
            case = {
                "source": f"tests/{path.name}::{fn.name}[{i}]",
                "gold": row.pop("gold"),
                "pred": row.pop("pred"),
            }
            case.update(expected=int(expected), **settings)
            case.update(row)  # per-case precision / strict / allow_set_relation_comp
            cases.append(case)
    return cases


def main(checkout: str, commit: str) -> None:
    unique: dict[tuple[str, str, int], dict] = {}
    for name in FILES:
        for case in cases_of(pathlib.Path(checkout) / "tests" / name):
            key = (case["gold"], case["pred"], case["expected"])
            if key in unique:
                unique[key]["sources"].append(case.pop("source"))
                continue
            case["sources"] = [case.pop("source")]
            unique[key] = case
    doc = {
        "origin": f"https://github.com/huggingface/Math-Verify/tree/{commit}/tests",
        "license": "Apache-2.0 (Math-Verify LICENCE); cases reproduced unchanged as data",
        "note": "one row per distinct (gold, pred, expected); sources lists every parametrized case it came from",
        "cases": list(unique.values()),
    }
    json.dump(doc, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
