"""The pages cannot drift from the code: every file, folder, module attribute, command, option, config field,
make target and link that ARCHITECTURE.md, the README, benchmarks/RESULTS.md and the pages under docs/ name
exists, every command is in the README's CLI listing, every package in its code map, every benchmark on the
results page, and no help text quotes one machine's figures. How a name is read and resolved:
tests/doc_references.py. (ARCHITECTURE.md's floors are checked against the import graph in
test_spine_boundaries.py, which reads the graph once for all its checks.)"""

from __future__ import annotations

import functools
import re

import pytest
import typer
from doc_references import (
    PACKAGE,
    REPO,
    Block,
    attribute_problems,
    blocks,
    command_lines,
    command_problems,
    config_problems,
    fenced_blocks,
    link_problems,
    machine_figures,
    make_targets,
    parse_blocks,
    path_problems,
    written_commands,
)

from swarmrl.cli import COMMANDS, app
from swarmrl.configs import RunConfig

PAGES = [
    "ARCHITECTURE.md",
    "README.md",
    "benchmarks/RESULTS.md",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")),
]


@functools.cache
def page_blocks(page: str) -> list[Block]:
    return blocks(REPO / page)


@functools.cache
def top_command():
    return typer.main.get_command(app)


@functools.cache
def load_command(name: str):
    return typer.main.get_command(COMMANDS[name].load()) if name in COMMANDS else None


@functools.cache
def entry_point_groups() -> set[str]:
    """The entry-point groups plugins are found in (`swarmrl.envs`, `swarmrl.losses`): names, not modules."""
    text = "".join(path.read_text() for path in sorted((PACKAGE / "configs").glob("*.py")))
    return set(re.findall(r'^\w+_ENTRY_POINT_GROUP = "([\w.]+)"', text, flags=re.M))


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_names_exists(page):
    assert path_problems(page_blocks(page)) == [], "see tests/doc_references.py for how a path resolves"


@pytest.mark.parametrize("page", PAGES)
def test_every_link_a_page_holds_reaches_its_file_and_heading(page):
    assert link_problems(REPO / page) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_module_attribute_a_page_names_is_defined_there(page):
    assert attribute_problems(page_blocks(page), entry_point_groups()) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_config_field_a_page_names_exists(page):
    assert config_problems(page_blocks(page), RunConfig) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_command_option_and_override_a_page_writes_exists(page):
    written = written_commands(page, (REPO / page).read_text(), page_blocks(page))
    assert command_problems(written, top_command(), load_command, RunConfig) == []


def test_the_readmes_cli_listing_shows_every_command():
    listing = fenced_blocks((REPO / "README.md").read_text(), "## CLI")
    listed = {line.split()[1] for block in listing for line in command_lines(block)}
    assert set(COMMANDS) - listed == set(), "add the command to the README's CLI listing"


@pytest.mark.parametrize("page", PAGES)
def test_every_make_target_a_page_names_exists(page):
    text = (REPO / page).read_text()
    named = set(re.findall(r"`make ([\w-]+)`", text)) | set(re.findall(r"^make ([\w-]+)", text, flags=re.M))
    assert named - make_targets() == set()


def help_texts(name: str, command) -> dict[str, str]:
    """Every help string `swarmrl NAME --help` (and its subcommands' help) prints."""
    texts = {name: command.help or ""}
    texts |= {f"{name} {param.opts[0]}": getattr(param, "help", None) or "" for param in command.params}
    for sub_name, sub in getattr(command, "commands", {}).items():
        texts |= help_texts(f"{name} {sub_name}", sub)
    return texts


def test_no_help_text_quotes_a_figure_of_one_machine():
    texts = {f"swarmrl {name}": entry.summary for name, entry in COMMANDS.items()}
    for name in COMMANDS:
        texts |= help_texts(f"swarmrl {name}", load_command(name))
    texts |= help_texts("swarmrl", top_command())
    assert machine_figures(texts) == [], "say what an option does; figures go to benchmarks/RESULTS.md"


def test_every_benchmark_has_a_row_on_the_results_page():
    results = (REPO / "benchmarks" / "RESULTS.md").read_text()
    scripts = {path.name for path in (REPO / "benchmarks").iterdir() if path.suffix in {".py", ".sh"}}
    assert {name for name in scripts if f"benchmarks/{name}" not in results} == set(), (
        "give the benchmark a row (its goal, today's figure or 'not measured', command, date, machine)"
    )


def test_the_readmes_code_map_has_a_row_per_package():
    readme = (REPO / "README.md").read_text()
    code_map = readme[readme.index("## Code map") :].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `swarmrl/(\w+)/` \|", code_map, flags=re.M))
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert packages - rows == set(), "add a row to the README's code map"


# --- the checks find what is wrong ---------------------------------------------------------------------------
WRONG_PAGE = """# A page

The trainer is in `trainer/nowhere.py`; `launch/roles.py` `trainer_role` built it.

- `generation/writer.py` `BatchWriter.for_run` makes a writer; `generation/writer.py` `BatchWriter.missing`
  does not exist, and `worker/local.py` `BatchWriter` only imports it.

Set `trainer.stepz`, `[loss.objective] kind = "ppo"`, `[trainer.lorra]`; `swarmrl.trainer.losses.no_loss`.
Run `swarmrl validator calibrat`, `swarmrl rl --dry-runs` or `swarmrl demo trainer.stepz=3`.

## CLI

```
swarmrl relay --upstream URL --trainer-key HEX       a relay
swarmrl shardcast origin|publsh ...                    serve or sign
```
"""


def test_the_checks_find_each_kind_of_wrong_name():
    found = parse_blocks("page.md", WRONG_PAGE)
    assert path_problems(found) == [
        "page.md:3: no file or folder trainer/nowhere.py",
        "page.md:3: no file or folder launch/roles.py",
    ]
    assert attribute_problems(found, set()) == [
        "page.md:5: generation/writer.py does not define BatchWriter.missing",
        "page.md:5: worker/local.py does not define BatchWriter",
        "page.md:8: no swarmrl.trainer.losses.no_loss",
    ]
    assert config_problems(found, RunConfig) == [
        "page.md:8: no config field trainer.stepz",
        'page.md:8: no config field [loss.objective] kind = "ppo"',
        "page.md:8: no config field [trainer.lorra]",
    ]
    written = written_commands("page.md", WRONG_PAGE, found)
    problems = command_problems(written, top_command(), load_command, RunConfig)
    assert [problem.rsplit(": ", 1)[1] for problem in problems] == [
        "`swarmrl relay` has no option --trainer-key",
        "`swarmrl shardcast` has no command publsh",
        "`swarmrl validator` has no command calibrat",
        "`swarmrl rl` has no option --dry-runs",
        "no config field trainer.stepz=3",
    ]


def test_the_link_check_finds_a_missing_file_and_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The `[run]` table\n")
    page = tmp_path / "page.md"
    page.write_text(
        "## Here\n\n[a](other.md#the-run-table) [b](other.md#gone) [c](missing.md) [d](#here) [e](#nowhere)\n"
        "[f](https://example.com/x#y)\n"
    )
    assert link_problems(page) == [
        "page.md: other.md has no heading #gone",
        "page.md: no file missing.md",
        "page.md: page.md has no heading #nowhere",
    ]
