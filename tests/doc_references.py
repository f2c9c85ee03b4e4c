"""What the project's pages name, read out of their markdown, and whether each name exists: files and folders,
a module's functions and classes, `swarmrl` commands and options, config fields, make targets, the floors.

Nothing is matched loosely. A name in backticks is a path when it holds a `/` or ends in `.py` (and is not a
placeholder such as `runs/R/config.json`, nor one of NOT_FILES). A path with a folder in it resolves against the
repository, `src/`, `src/swarmrl/`, or a folder named before it in the same block: paragraph, table row, or list
item with the sentence that leads into the list. A file's bare name (`llama_layers.py`) resolves only against
the folders named before it in its block; where none is, it is a file of the reader's (`verifier.py` in a task
pack) and is not checked. `path.py` `name` written side by side claims that the module itself defines
`name` (`Class.attribute` too), read with `ast`, never by importing the module. Blocks under a heading that says
"not built yet" are plans, not claims, and are skipped.
"""

from __future__ import annotations

import ast
import functools
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from swarmrl.configs.reference import models_of

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "swarmrl"
ROOTS = (REPO, REPO / "src", PACKAGE)

# Names in backticks shaped like paths that are no file of the repository: metric names, a MIME type, a unit,
# a format's name, and what a run directory or a virtual environment holds once made.
NOT_FILES = frozenset(
    {
        "samples/s",
        "text/event-stream",
        "eval/step",
        "islands/round",
        "islands/dropped",
        "root/name",
        "accepted/step_k/",
        "keys/",
        "logs/",
        "eval/",
        "checkpoints/step_0",
        "step_0/config.json",
        ".venv/bin/swarmrl",
        "swarmrl-task-pack/1",
    }
)
PATH = re.compile(r"\.?[\w-][\w.-]*(/[\w.-]+)*/?")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z0-9_]*(\.\w+)?(/|$)|<")
FILE_SUFFIXES = ("json", "jsonl", "toml", "py", "md", "pem", "parquet", "safetensors", "url", "txt", "lock")


@dataclass(frozen=True)
class Block:
    """A paragraph, list item or table row of prose (fenced code left out), with the sentence that leads into
    its list, if it is a list item."""

    page: str
    line: int
    text: str
    lead: str = ""
    heading: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def spans(self) -> list[tuple[str, str]]:
        """Each code span with the text that follows it up to the next span."""
        pieces = self.text.split("`")
        return [(pieces[i], pieces[i + 1] if i + 1 < len(pieces) else "") for i in range(1, len(pieces), 2)]


def blocks(page: Path) -> list[Block]:
    return parse_blocks(page.relative_to(REPO).as_posix(), page.read_text())


def parse_blocks(where: str, text: str) -> list[Block]:
    """The prose blocks of a markdown text (`where` names it in messages)."""
    found: list[Block] = []
    current: list[str] = []
    start, lead, heading, fenced, in_list = 0, "", "", False, False

    def close() -> None:
        nonlocal current, lead
        if current:
            joined = " ".join(current)
            found.append(Block(where, start, joined, lead if in_list else "", heading))
            lead = lead if in_list else joined
        current = []

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
        elif fenced:
            continue
        elif not stripped or stripped.startswith(("#", "|")):
            close()
            in_list = in_list and stripped.startswith("|")
            if stripped.startswith("#"):
                lead, heading = "", stripped
            if stripped:
                found.append(Block(where, number, stripped, "", heading))
        elif re.match(r"([-*]|\d+\.) ", stripped):
            close()
            in_list, start, current = True, number, [stripped]
        else:
            start = start if current else number
            current.append(stripped)
    close()
    return [block for block in found if "not built yet" not in block.heading]


def fenced_blocks(text: str, after_heading: str) -> list[str]:
    """The fenced code blocks of the section of `text` under `after_heading` (a `## ...` line)."""
    section = text[text.index(after_heading + "\n") :]
    following = re.search(r"\n## ", section[1:])
    section = section[: following.start() + 1] if following else section
    return re.findall(r"```[^\n]*\n(.*?)```", section, flags=re.S)


# --- paths ---------------------------------------------------------------------------------------------------
def is_path(span: str) -> bool:
    if PATH.fullmatch(span) is None or span in NOT_FILES or PLACEHOLDER.search(span):
        return False
    return "/" in span or span.endswith(".py")


def is_bare(span: str) -> bool:
    """A file's name with no folder in it: `sampler.py` (a folder's, `paged/`, resolves like a path)."""
    return "/" not in span


def resolve(span: str, folders: list[Path]) -> Path | None:
    for base in (*([] if is_bare(span) else ROOTS), *folders):
        candidate = base / span
        if candidate.exists() and (candidate.is_dir() or not span.endswith("/")):
            return candidate
    return None


@dataclass
class PathCheck:
    """The paths of a block resolved in order, each resolved one's folder a place for those after it."""

    folders: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def take(self, span: str) -> Path | None:
        if not is_path(span) or (is_bare(span) and not self.folders):
            return None
        found = resolve(span, self.folders)
        if found is None:
            self.missing.append(span)
            return None
        self.folders.append(found if found.is_dir() else found.parent)
        return found


def block_paths(block: Block) -> tuple[list[tuple[str, Path]], list[str]]:
    """The paths a block names, resolved, and those that resolve nowhere."""
    check = PathCheck()
    for span, _ in Block(block.page, block.line, block.lead).spans():
        check.take(span)
    check.missing.clear()  # the lead-in is checked as a block of its own
    resolved = []
    for span, _ in block.spans():
        found = check.take(span)
        if found is not None:
            resolved.append((span, found))
    return resolved, check.missing


# --- names in modules ----------------------------------------------------------------------------------------
def module_file(dotted: str) -> Path | None:
    path = REPO / "src" / Path(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_of(file: Path) -> str:
    parts = file.relative_to(REPO / "src").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _body(file: Path) -> list[ast.stmt]:
    return ast.parse(file.read_text()).body


def _top_level(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Every name a module (or class) body binds, at its top level or inside its if/try/with blocks."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        names[name.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            inner += [stmt for handler in getattr(node, "handlers", []) for stmt in handler.body]
            names.update(_top_level(inner))
    return names


def _lazy_exports(body: list[ast.stmt]) -> dict[str, str]:
    """`_EXPORTS = {"name": "module", ...}` of a package that imports its names on first use."""
    for node in body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in node.targets):
            value = ast.literal_eval(node.value)
            return {str(name): str(module) for name, module in value.items()}
    return {}


def _imported_from(node: ast.ImportFrom, file: Path, name: str) -> str | None:
    """The module a `from X import name` in `file` reads `name` from (relative imports resolved)."""
    if node.level:
        package = _module_of(file).split(".")
        if file.name != "__init__.py":
            package = package[:-1]
        base = package[: len(package) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])
    return node.module


def defines(file: Path, dotted: str, follow_imports: bool = True, depth: int = 0) -> bool:
    """Whether the module in `file` has the attribute `dotted` (`name` or `Class.member`), followed through
    base classes and (unless `follow_imports` is false: the name must be defined in this very file) imports and
    lazy exports, without importing anything."""
    if depth > 8:
        return False
    head, _, rest = dotted.partition(".")
    body = _body(file)
    node = _top_level(body).get(head)
    if not follow_imports and isinstance(node, ast.Import | ast.ImportFrom):
        return False
    if node is None and not follow_imports:
        return False
    if node is None:
        exported = _lazy_exports(body).get(head)
        if exported is not None:
            target = module_file(exported)
            return target is not None and defines(target, dotted, depth=depth + 1)
        submodule = module_file(f"{_module_of(file)}.{head}")
        return submodule is not None and (not rest or defines(submodule, rest, depth=depth + 1))
    if isinstance(node, ast.Import):
        alias = next(alias for alias in node.names if (alias.asname or alias.name).split(".")[0] == head)
        target = module_file(alias.name if alias.asname else head)
        return not rest or (target is not None and dotted_exists(f"{_module_of(target)}.{rest}"))
    if isinstance(node, ast.ImportFrom):
        source = _imported_from(node, file, head)
        original = next(alias.name for alias in node.names if (alias.asname or alias.name) == head)
        target = module_file(source or "")
        submodule = module_file(f"{source}.{original}")
        if submodule is not None:
            return not rest or defines(submodule, rest, depth=depth + 1)
        return target is not None and defines(
            target, f"{original}.{rest}" if rest else original, depth=depth + 1
        )
    if not rest:
        return True
    if isinstance(node, ast.ClassDef):
        return _class_defines(file, node, rest, depth)
    return False


def _class_defines(file: Path, node: ast.ClassDef, dotted: str, depth: int) -> bool:
    head, _, rest = dotted.partition(".")
    member = _top_level(node.body).get(head)
    if member is not None:
        return not rest or (isinstance(member, ast.ClassDef) and _class_defines(file, member, rest, depth))
    bases = [ast.unparse(base) for base in node.bases]
    return any(
        defines(file, f"{base}.{dotted}", depth=depth + 1) for base in bases if IDENTIFIER.fullmatch(base)
    )


def dotted_exists(dotted: str) -> bool:
    """`swarmrl.a.b.name`: the longest prefix that is a module, then attributes of it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        file = module_file(".".join(parts[:cut]))
        if file is not None:
            return cut == len(parts) or defines(file, ".".join(parts[cut:]))
    return False


def named_attributes(block: Block, resolved: dict[str, Path]) -> list[tuple[str, str, Path]]:
    """`path.py` `name` pairs of a block: a module's file (already resolved) followed only by blanks and a name."""
    pairs = []
    spans = block.spans()
    for (span, between), (name, _) in zip(spans, spans[1:], strict=False):
        if span in resolved and not between.strip() and IDENTIFIER.fullmatch(name):
            file = resolved[span]
            file = file / "__init__.py" if file.is_dir() else file
            if file.suffix == ".py":
                pairs.append((span, name, file))
    return pairs


# --- config fields -------------------------------------------------------------------------------------------
def config_field(root: type[BaseModel], dotted: str, value: str | None = None) -> bool:
    """Whether `a.b.c` is a field of the config (through nested tables and every member of a union), and,
    for a `kind`/`type` or other Literal field given a value, whether the value is one it takes."""
    models: list[type[BaseModel]] = [root]
    annotations: list[typing.Any] = []
    for part in dotted.split("."):
        fields = [model.model_fields[part] for model in models if part in model.model_fields]
        if not fields:
            return bool(annotations) and all(typing.get_origin(a) is dict for a in annotations)
        annotations = [info.annotation for info in fields]
        models = [model for annotation in annotations for model in models_of(annotation)]
    choices = [_choices(annotation) for annotation in annotations]
    if value is None or any(found is None for found in choices):
        return True
    return value.strip("\"'") in {str(choice) for found in choices for choice in found or ()}


def _choices(annotation: typing.Any) -> list[typing.Any] | None:
    """The values a field takes when it takes only Literal values (None: it takes others too)."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return list(arguments)
    if origin is typing.Annotated:
        return _choices(arguments[0])
    if origin in (typing.Union, types.UnionType):
        found = [_choices(argument) for argument in arguments if argument is not type(None)]
        return None if any(part is None for part in found) else [v for part in found for v in part or ()]
    return None


CONFIG_TABLE = re.compile(r"\[\[?([a-z_][\w.]*)\]\]?(?: ([a-z_]\w*)(?: = (\S+))?)?")
CONFIG_PATH = re.compile(r"([a-z_]\w*(?:\.[a-z_]\w*)+)(?:=(\S+))?")


def config_references(span: str, sections: set[str]) -> list[tuple[str, str | None]]:
    """The config fields a span names: `[a.b]`, `[a] field`, `[a] kind = "x"`, `a.b.c` or `a.b=value`
    (quoted overrides too), when `a` is a section of the run config and the name is no file's."""
    span = span.strip("\"'")
    table = CONFIG_TABLE.fullmatch(span)
    if table is not None:
        path = table.group(1) + (f".{table.group(2)}" if table.group(2) else "")
        return [(path, table.group(3))] if path.split(".")[0] in sections else []
    dotted = CONFIG_PATH.fullmatch(span)
    if dotted is None or dotted.group(1).split(".")[0] not in sections:
        return []
    if dotted.group(1).rsplit(".", 1)[1] in FILE_SUFFIXES:
        return []
    return [(dotted.group(1), dotted.group(2))]


# --- floors --------------------------------------------------------------------------------------------------
def floors(page: Path) -> list[list[str]]:
    """The rooms of each floor of ARCHITECTURE.md's drawing, top floor first: `a · b · c   what they are`."""
    (drawing,) = fenced_blocks(page.read_text(), "## Floors: imports only go down")
    drawn = []
    for line in drawing.splitlines():
        if line.strip():
            rooms = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            drawn.append([room.strip() for room in rooms.split("·")])
    return drawn


# --- commands ------------------------------------------------------------------------------------------------
WORD = re.compile(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*")


def command_lines(block: str) -> list[str]:
    """The commands of a CLI listing (the left column of each `swarmrl ...` line, its indented option lines
    joined to it; the description column left out)."""
    commands: list[str] = []
    for line in block.splitlines():
        left = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].rstrip("\\ ")
        if line.startswith("swarmrl"):
            commands.append(left)
        elif commands and line.startswith(" ") and len(line) - len(line.lstrip()) < 8 and left[:1] in "-[":
            commands[-1] += " " + left
    return commands


@dataclass
class CommandClaim:
    """What one written command claims: its words name (sub)commands, its options exist on the command they
    follow, its `@file` exists, its `a.b=value` overrides are config fields."""

    words: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)


def check_command(text: str, top: typing.Any, load: typing.Callable[[str], typing.Any]) -> CommandClaim:
    """Walk `swarmrl a b --opt ...` down the click tree from `top` (`load(name)`: a top-level command)."""
    claim, command, descend, expects_value = CommandClaim(), top, True, False
    for token in text.split()[1:]:
        clean = token.strip("[](),\"'")
        if expects_value:
            expects_value = False
        elif clean.startswith("-"):
            for option in re.split(r"[|/]", clean.split("=")[0]):
                found = [p for p in command.params if option in (*p.opts, *p.secondary_opts)]
                if option != "--help" and not found:
                    claim.problems.append(f"`{' '.join(['swarmrl', *claim.words])}` has no option {option}")
                expects_value = bool(found) and not found[0].is_flag and "=" not in clean and option == clean
        elif clean.startswith("@"):
            path = clean[1:]  # a bare name (`@run.toml`) is the reader's own file
            if not is_bare(path) and not PLACEHOLDER.search(path) and resolve(path, []) is None:
                claim.problems.append(f"no file {path}")
        elif "=" in clean and "." in clean.split("=")[0] and "<" not in clean:
            claim.overrides.append(clean)
        elif descend and hasattr(command, "commands") and WORD.fullmatch(clean):
            names = clean.split("|")
            for name in names:
                if (load(name) if command is top else command.commands.get(name)) is None:
                    claim.problems.append(f"`{' '.join(['swarmrl', *claim.words])}` has no command {name}")
                    return claim
            command = load(names[0]) if command is top else command.commands[names[0]]
            claim.words.append(clean)
            descend = len(names) == 1
        else:
            descend = False  # an argument or a placeholder: what follows is no command name
            if clean.startswith("<"):
                return claim
    return claim


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))


# --- what a page gets wrong ----------------------------------------------------------------------------------
def path_problems(found: list[Block]) -> list[str]:
    return [f"{block.where}: no file or folder {span}" for block in found for span in block_paths(block)[1]]


def attribute_problems(found: list[Block], entry_point_groups: set[str]) -> list[str]:
    """`path.py` `name` pairs whose module does not itself define the name; `swarmrl.a.b` names that do not
    exist (an entry-point group is a name, not a module)."""
    wrong = []
    for block in found:
        for span, name, file in named_attributes(block, dict(block_paths(block)[0])):
            if not defines(file, name, follow_imports=False):
                wrong.append(f"{block.where}: {span} does not define {name}")
        for span, _ in block.spans():
            if (
                re.fullmatch(r"swarmrl(\.\w+)+", span)
                and span not in entry_point_groups
                and not dotted_exists(span)
            ):
                wrong.append(f"{block.where}: no {span}")
    return wrong


def config_problems(found: list[Block], root: type[BaseModel]) -> list[str]:
    """Config fields (and kinds) that the run config lacks; `coordinator.client` and the like, modules of
    swarmrl spelt without the package, are names of modules, not fields."""
    sections = set(root.model_fields)
    return [
        f"{block.where}: no config field {span}"
        for block in found
        for span, _ in block.spans()
        for path, value in config_references(span, sections)
        if not config_field(root, path, value) and module_file(f"swarmrl.{path}") is None
    ]


def command_problems(
    written: list[tuple[str, str]],
    top: typing.Any,
    load: typing.Callable[[str], typing.Any],
    root: type[BaseModel],
) -> list[str]:
    wrong = []
    for where, text in written:
        claim = check_command(text, top, load)
        wrong += [f"{where}: {text!r}: {problem}" for problem in claim.problems]
        for override in claim.overrides:
            path, _, value = override.partition("=")
            if not config_field(root, path, value):
                wrong.append(f"{where}: {text!r}: no config field {override}")
    return wrong


def written_commands(where: str, text: str, found: list[Block]) -> list[tuple[str, str]]:
    """(where, command) for every `swarmrl ...` a page writes: in a `## CLI` listing and in code spans."""
    listed = fenced_blocks(text, "## CLI") if "\n## CLI\n" in text else []
    return [(f"{where} (## CLI)", line) for block in listed for line in command_lines(block)] + [
        (block.where, span) for block in found for span, _ in block.spans() if span.startswith("swarmrl ")
    ]


# --- figures of one machine ----------------------------------------------------------------------------------
# Text a user reads at the command line or in the config reference states what a setting does, not what one
# machine measured: a core count, a GPU's name, what "was seen". Figures live in benchmarks/RESULTS.md.
MACHINE_FIGURE = re.compile(
    r"(?<![\d.])\d+\s+(\w+\s+)?(cores?|CPUs?)\b|\bwere (seen|measured)\b|\b(H100|H200|A100|RTX\s?\d{4})\b",
    flags=re.I,
)


def machine_figures(texts: dict[str, str]) -> list[str]:
    """`where: the words` for every text that quotes a figure of one machine."""
    return [
        f"{where}: {found.group(0)!r}"
        for where, text in texts.items()
        for found in MACHINE_FIGURE.finditer(text)
    ]


# --- links ---------------------------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchor of every heading of a markdown text (code spans' backticks dropped, as GitHub does)."""
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", outside, flags=re.M)
    return {
        re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        for heading in headings
    }


def link_problems(page: Path) -> list[str]:
    """Relative links of a page whose file does not exist, or whose `#anchor` is no heading of that file."""
    wrong, where = [], page.relative_to(REPO) if page.is_relative_to(REPO) else page.name
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            wrong.append(f"{where}: no file {path}")
        elif anchor and anchor not in heading_anchors(file.read_text()):
            wrong.append(f"{where}: {path or page.name} has no heading #{anchor}")
    return wrong
