"""The configuration reference, rendered from the models themselves: every section, field, type, default and
description of a run's TOML (and of `swarmrl diloco`'s), so the page cannot say what the code does not.

    python -m swarmrl.configs.reference          # rewrite docs/configuration.md and the README's section table
    python -m swarmrl.configs.reference --check  # exit 1 when either differs from the models

`make docs` runs the first; `tests/unit/spine/test_spine_config_reference.py` makes the second's comparison.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.configs.run import RunConfig

PAGE = Path("docs/configuration.md")
README = Path("README.md")
REGENERATE = "make docs (python -m swarmrl.configs.reference)"
TABLE_START = (
    "<!-- config-sections: generated from swarmrl.configs by `make docs`; edit the models, not this table -->"
)
TABLE_END = "<!-- end config-sections -->"

INTRO = f"""# Configuration reference

<!-- Generated from the pydantic models of src/swarmrl/configs/ by {REGENERATE}. Edit the models'
descriptions, not this file: a test fails when the two differ. -->

A run is one TOML file (`configs/demo.toml` is one); each `[section]` below is a pydantic model of
`src/swarmrl/configs/`, every field typed, defaulted and described. A field that is not set takes its default;
an unknown field is refused, naming the nearest one. A field is set on the command line as `section.field=value`
(a TOML value), e.g. `swarmrl demo trainer.steps=20 "loss.objective.kind='gspo'"`, and
`swarmrl rl @run.toml --dry-run` prints the resolved config.

A table chosen by a `kind` (or `type`) field lists the fields of each kind under a heading of its own; a list of
tables (`[[tasks.sources]]`) lists the fields of one entry. `swarmrl diloco` reads a file of its own: its
`[diloco]` table comes last.
"""

DILOCO = (
    "`swarmrl diloco` and `swarmrl diloco-replica` read a TOML of their own (`configs/diloco-demo.toml`: this "
    "table, or its fields bare), not a run's config."
)


def models_of(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds (a model, a union of models, a list of them, optional or not), in order."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in models_of(argument)]


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union, typing.Annotated):
        return any(_is_list(argument) for argument in typing.get_args(annotation))
    return typing.get_origin(annotation) is list


def chosen_by(model: type[BaseModel]) -> str:
    """`kind = "x"` for a member of a union chosen by its `kind` (or `type`) field, a one-value Literal."""
    for name in ("kind", "type"):
        field = model.model_fields.get(name)
        if field is not None and typing.get_origin(field.annotation) is Literal:
            values = typing.get_args(field.annotation)
            if len(values) == 1:
                return f"{name} = {json.dumps(values[0])}"
    raise TypeError(f"{model.__name__} is a member of a union but has no one-value `kind` or `type` field")


@dataclass(frozen=True)
class Table:
    """One heading of the page: the fields of one model at one place of the config (`model` None: the heading
    of a table chosen by kind, whose kinds follow it one level down)."""

    path: str  # dotted: `trainer.lora`
    model: type[BaseModel] | None
    description: str
    level: int  # of its markdown heading: 2 for a section, one more for each table it sits in
    many: bool = False  # an entry of a list of tables: `[[tasks.sources]]`
    chosen: str = ""  # a member of a union: `kind = "paged"`

    @property
    def heading(self) -> str:
        place = f"[[{self.path}]]" if self.many else f"[{self.path}]"
        return f"{place} {self.chosen}" if self.chosen else place


def tables(path: str, field: FieldInfo, level: int = 2) -> list[Table]:
    """The headings of the models `field` holds at `path` and of every model nested in them, depth first."""
    members, many, about = models_of(field.annotation), _is_list(field.annotation), field.description or ""
    if not members:
        return []
    if len(members) == 1:
        return _with_nested(Table(path, members[0], about, level, many))
    kinds = ", ".join(f"`{chosen_by(member)}`" for member in members)
    about = f"{sentence(about)} One of {kinds}; each kind's fields follow.".strip()
    found = [Table(path, None, about, level, many)]
    for member in members:
        found += _with_nested(Table(path, member, "", level + 1, many, chosen_by(member)))
    return found


def _with_nested(table: Table) -> list[Table]:
    assert table.model is not None
    return [table] + [
        nested
        for name, field in table.model.model_fields.items()
        for nested in tables(f"{table.path}.{name}", field, table.level + 1)
    ]


def type_name(annotation: Any) -> str:
    """A field's type as a TOML user reads it: `int`, `"a" | "b"`, `list of float`, `table`, `int (optional)`."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(arguments[0])
    if origin is Literal:
        return " | ".join(json.dumps(value) for value in arguments)
    if models_of(annotation) and origin is not list:
        return "table"
    if origin in (types.UnionType, typing.Union):
        present = [argument for argument in arguments if argument is not type(None)]
        shown = " | ".join(type_name(argument) for argument in present)
        return f"{shown} (optional)" if len(present) < len(arguments) else shown
    if origin is tuple and Ellipsis not in arguments:
        return "[" + ", ".join(type_name(argument) for argument in arguments) + "]"
    if origin in (list, tuple):
        item = type_name(arguments[0])
        return "list of tables" if item == "table" else f"list of {item}"
    if origin is dict:
        return f"table of {type_name(arguments[0])} → {type_name(arguments[1])}"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def toml_value(value: Any) -> str:
    """`value` as a TOML file would write it, inline."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        shown = {key: item for key, item in value.items() if item is not None}  # TOML has no null: left out
        return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in shown.items()) + "}"
    return repr(value)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return (
            f"`{chosen_by(type(value))}`" if len(models_of(field.annotation)) > 1 else "its table's defaults"
        )
    return f"`{toml_value(value)}`"


def cell(text: str) -> str:
    """Text fit for one markdown table cell: one line, pipes escaped, `<...>` outside code shown as written."""
    parts = " ".join(text.split()).split("`")
    for index in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def docstring(model: type[BaseModel]) -> str:
    own = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(own).split()) if own else ""


def sentence(text: str) -> str:
    """`text` with a capital first letter and a full stop (empty stays empty)."""
    text = text.strip()
    if not text:
        return ""
    return text[0].upper() + text[1:] + ("" if text[-1] in ".!?)" else ".")


def render_table(table: Table, shown: dict[type[BaseModel], str]) -> str:
    """One heading: what the table is for, then a row per field (or a pointer to where the same model is)."""
    lines = [f"{'#' * table.level} `{table.heading}`", ""]
    parts = (table.description, docstring(table.model) if table.model else "")
    about = " ".join(sentence(text) for text in parts if text)
    if about:
        lines += [cell(about), ""]
    if table.model is None:
        return "\n".join(lines)
    if table.model in shown:
        return "\n".join([*lines, f"The fields of `{shown[table.model]}`.", ""])
    shown[table.model] = table.heading
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, field in table.model.model_fields.items():
        kind, default = cell(type_name(field.annotation)), cell(default_text(field))
        lines.append(f"| `{name}` | {kind} | {default} | {cell(field.description or '')} |")
    return "\n".join([*lines, ""])


def reference_page() -> str:
    """The whole of docs/configuration.md."""
    run = [table for name, field in RunConfig.model_fields.items() for table in tables(name, field)]
    diloco = _with_nested(Table("diloco", DiLoCoConfig, DILOCO, 2))
    shown: dict[type[BaseModel], str] = {}
    return "\n".join([INTRO, *(render_table(table, shown) for table in run + diloco)]).rstrip() + "\n"


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, spaces to hyphens, other punctuation dropped."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def sections_table() -> str:
    """The README's table of a run config's sections, each linked to its part of docs/configuration.md."""
    lines = ["| section | what it sets |", "|---|---|"]
    for name, field in RunConfig.model_fields.items():
        about = field.description or docstring(models_of(field.annotation)[0])
        lines.append(f"| [`[{name}]`]({PAGE.as_posix()}#{anchor(f'[{name}]')}) | {cell(about)} |")
    return "\n".join(lines)


def readme_with_table(readme: str) -> str:
    """`readme` with the text between its section-table markers replaced by `sections_table()`."""
    start, end = readme.find(TABLE_START), readme.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"{README}: the markers of the generated section table are missing ({TABLE_START})")
    return readme[: start + len(TABLE_START)] + "\n" + sections_table() + "\n" + readme[end:]


def stale_files(root: Path) -> dict[Path, str]:
    """The generated files under `root` that differ from the models, each with the text it should hold."""
    wanted = {root / PAGE: reference_page(), root / README: readme_with_table((root / README).read_text())}
    return {path: text for path, text in wanted.items() if not path.exists() or path.read_text() != text}


def main(argv: list[str]) -> int:
    stale = stale_files(Path.cwd())
    if "--check" in argv:
        for path in stale:
            print(f"{path} differs from the config models; regenerate it: {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in stale.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
