"""The import graph of a source tree read statically, and the role boundaries checked over it.

Every import counts: at module level, inside functions and under TYPE_CHECKING, plus the implicit import of
each parent package (`import a.b.c` runs `a/__init__.py` and `a/b/__init__.py`). No module is executed.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImportGraph:
    """`edges[m]`: the modules of the tree that module `m` imports; `external[m]`: the top-level names of what
    it imports from outside the tree (`torch`, `os`, ...)."""

    edges: dict[str, set[str]]
    external: dict[str, set[str]]

    @classmethod
    def read(cls, package_dir: Path) -> ImportGraph:
        files = {_module_name(package_dir, path): path for path in sorted(package_dir.rglob("*.py"))}
        edges: dict[str, set[str]] = {}
        external: dict[str, set[str]] = {}
        for module, path in files.items():
            inside, outside = set(), set()
            for target in _imported_names(module, path):
                while target and target not in files and target.split(".")[0] == package_dir.name:
                    target = target.rpartition(".")[0]  # `from pkg.mod import name`: the module is pkg.mod
                if target in files:
                    inside.update(_with_parents(target))
                elif target.split(".")[0] != package_dir.name:
                    outside.add(target.split(".")[0])
            inside.update(_with_parents(module.rpartition(".")[0]))
            inside.discard(module)
            edges[module], external[module] = inside & files.keys(), outside
        return cls(edges, external)

    def modules_under(self, package: str) -> set[str]:
        return {m for m in self.edges if m == package or m.startswith(package + ".")}

    def reach(self, starts: set[str], stop: set[str]) -> dict[str, list[str]]:
        """Every module reachable from `starts`, with a shortest import chain that reaches it; modules in `stop`
        are reached but not entered."""
        chains = {m: [m] for m in starts}
        queue = deque(sorted(starts))
        while queue:
            module = queue.popleft()
            if module in stop:
                continue
            for target in sorted(self.edges[module]):
                if target not in chains:
                    chains[target] = [*chains[module], target]
                    queue.append(target)
        return chains


@dataclass(frozen=True)
class Role:
    """A package run as its own process (or its own side of a wire): others may import only its `seams`."""

    name: str
    package: str
    seams: frozenset[str] = frozenset()


def crossings(graph: ImportGraph, roles: list[Role], orchestrators: list[str]) -> list[str]:
    """Imports that cross a boundary, each as `who: chain`: a role (or the library floors below the roles)
    reaching code of another role other than its seams, or reaching an orchestrator (launch, cli ...: they
    stand above every role). Another role's module is reached but not entered: what a seam imports is its own
    role's business. The package `__init__` of a role counts as a seam (importing any seam runs it)."""
    owner = {m: role.name for role in roles for m in graph.modules_under(role.package)}
    public = {m for role in roles for m in role.seams | {role.package}}
    above = {m for package in orchestrators for m in graph.modules_under(package)}
    library = set(graph.edges) - owner.keys() - above
    sides = [(role.name, graph.modules_under(role.package)) for role in roles] + [("library", library)]
    found = []
    for name, own in sides:
        for module, chain in graph.reach(own, stop=set(graph.edges) - own - library).items():
            if module in above or (owner.get(module, name) != name and module not in public):
                found.append(f"{name}: {' -> '.join(chain)}")
    return sorted(found)


def outside_imports(graph: ImportGraph, package: str, allowed: set[str]) -> list[str]:
    """What `package` imports, directly or through any module it reaches, from the tree outside it (the root
    package's `__init__` aside, which every import runs) or from outside the tree other than the standard
    library and `allowed`."""
    own = graph.modules_under(package)
    root = package.split(".")[0]
    found = []
    for module, chain in graph.reach(own, stop=set()).items():
        if module not in own and module != root:
            found.append(" -> ".join(chain))
        for name in sorted(graph.external[module] - set(sys.stdlib_module_names) - allowed):
            found.append(" -> ".join([*chain, name]))
    return sorted(found)


def upward_imports(drawn: list[list[str]], edges: dict[str, set[str]]) -> list[str]:
    """Imports from a room to one on its own floor or above (`drawn`: the floors, top first)."""
    level = {room: len(drawn) - index for index, rooms in enumerate(drawn) for room in rooms}
    return sorted(
        f"{module} imports {target}: {_room(module)} is not above {_room(target)}"
        for module, targets in edges.items()
        for target in targets
        if _room(module) in level and _room(target) in level and _room(module) != _room(target)
        if level[_room(module)] <= level[_room(target)]
    )


def _room(module: str) -> str:
    """`swarmrl.trainer.losses` -> `trainer`; the package's own `__init__` is no room."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def rooms_of_package(package_dir: Path) -> set[str]:
    """Every package folder and top-level module of src/swarmrl (but its `__init__` and `__main__`)."""
    folders = {path.name for path in package_dir.iterdir() if (path / "__init__.py").is_file()}
    modules = {path.stem for path in package_dir.glob("*.py")} - {"__init__", "__main__"}
    return folders | modules


def _module_name(package_dir: Path, path: Path) -> str:
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)] if module else []


def _imported_names(module: str, path: Path) -> set[str]:
    """What each import statement names: `a.b` for `import a.b`; `pkg.mod` and `pkg.mod.name` for
    `from pkg.mod import name` (the name may be a submodule); relative imports resolved against `module`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found
