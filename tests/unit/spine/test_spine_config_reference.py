"""The configuration reference is the models': docs/configuration.md and the README's table of sections are what
`swarmrl.configs.reference` renders from them, every field is described, and no description quotes what one
machine measured."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import pytest
from doc_references import REPO, machine_figures
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from swarmrl.configs import RunConfig
from swarmrl.configs.diloco import DiLoCoConfig
from swarmrl.configs.reference import (
    REGENERATE,
    TABLE_END,
    TABLE_START,
    models_of,
    readme_with_table,
    render_table,
    stale_files,
    tables,
    type_name,
)


def every_model() -> dict[str, type[BaseModel]]:
    """Each model a run config or a DiLoCo config holds, by the first place it appears at."""
    found: dict[str, type[BaseModel]] = {}

    def visit(model: type[BaseModel], place: str) -> None:
        if model in found.values():
            return
        found[place] = model
        for name, field in model.model_fields.items():
            for inner in models_of(field.annotation):
                visit(inner, f"{place}.{name}")

    visit(RunConfig, "run config")
    visit(DiLoCoConfig, "diloco")
    return found


def test_the_pages_are_what_the_models_render():
    stale = stale_files(REPO)
    assert not stale, f"{sorted(str(path) for path in stale)} differ from the config models: run {REGENERATE}"


def test_every_field_is_described():
    bare = [
        f"{place}.{name} ({model.__name__})"
        for place, model in every_model().items()
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert bare == [], "give each field a description= (it is the configuration reference)"


def test_no_description_quotes_a_figure_of_one_machine():
    texts = {
        f"{place}.{name}": field.description or ""
        for place, model in every_model().items()
        for name, field in model.model_fields.items()
    }
    texts |= {place: model.__doc__ or "" for place, model in every_model().items()}
    assert machine_figures(texts) == [], "say what the setting does; figures go to benchmarks/RESULTS.md"


def test_the_figure_check_finds_them():
    found = machine_figures(
        {
            "a": "on 2 cores shared by a trainer and two workers, 4 made the steps slower",
            "b": "it imports torch: 10-25 s were seen on 2 loaded cores",
            "c": "4.5e-5 between a CUDA worker on an H100 and a CPU validator",
            "d": "no honest margin below +0.02 on CPU; one per CPU core; 0.5 cores",
        }
    )
    assert found == ["a: '2 cores'", "b: 'were seen'", "b: '2 loaded cores'", "c: 'H100'"]


class Inner(BaseModel):
    """Where the <name> goes."""

    depth: int = Field(3, description="how deep | how far")


class Kind(BaseModel):
    kind: Literal["a"] = Field("a", description="which")


class Other(BaseModel):
    kind: Literal["b"] = Field("b", description="which")
    size: Annotated[int, Field(ge=1)] | Literal["auto"] = Field("auto", description="rows")


class Sample(BaseModel):
    name: str = Field("x", description="a `<name>`")
    ratio: float | None = Field(None, description="share")
    pair: tuple[float, float] = Field((0.1, 0.8), description="band")
    inner: Inner = Field(default_factory=Inner, description="the inner table")
    choice: Annotated[Kind | Other, Field(discriminator="kind")] = Field(
        default_factory=Other, description="one"
    )
    items: list[Inner] = Field(default_factory=list, description="entries")
    path: Path = Field(Path("runs"), description="where")


def test_a_model_renders_as_its_tables_by_hand():
    found = tables("sample", FieldInfo(annotation=Sample, description="a sample"))
    assert [table.heading for table in found] == [
        "[sample]",
        "[sample.inner]",
        "[sample.choice]",
        '[sample.choice] kind = "a"',
        '[sample.choice] kind = "b"',
        "[[sample.items]]",
    ]
    shown: dict = {}
    assert render_table(found[0], shown) == "\n".join(
        [
            "## `[sample]`",
            "",
            "A sample.",
            "",
            "| field | type | default | description |",
            "|---|---|---|---|",
            '| `name` | str | `"x"` | a `<name>` |',
            "| `ratio` | float (optional) | unset | share |",
            "| `pair` | [float, float] | `[0.1, 0.8]` | band |",
            "| `inner` | table | its table's defaults | the inner table |",
            '| `choice` | table | `kind = "b"` | one |',
            "| `items` | list of tables | `[]` | entries |",
            '| `path` | path | `"runs"` | where |',
            "",
        ]
    )
    assert render_table(found[1], shown).splitlines()[2:] == [
        "The inner table. Where the &lt;name&gt; goes.",
        "",
        "| field | type | default | description |",
        "|---|---|---|---|",
        "| `depth` | int | `3` | how deep \\| how far |",
    ]
    assert "The fields of `[sample.inner]`." in render_table(found[-1], shown)
    assert type_name(Other.model_fields["size"].annotation) == 'int | "auto"'


def test_a_readme_without_the_markers_is_refused_and_one_with_them_is_filled():
    with pytest.raises(ValueError, match="markers"):
        readme_with_table("# no table here\n")
    filled = readme_with_table(f"before\n{TABLE_START}\nold rows\n{TABLE_END}\nafter\n")
    assert filled.startswith(f"before\n{TABLE_START}\n| section | what it sets |")
    assert "old rows" not in filled and filled.endswith(f"{TABLE_END}\nafter\n")
    assert "| [`[contract]`](docs/configuration.md#contract) |" in filled
