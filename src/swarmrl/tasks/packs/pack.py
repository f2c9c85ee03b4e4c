"""A task pack loaded and checked statically: files, manifest, signature, rows, references, verifier source.

Nothing of the pack runs here: the verifier's source is only parsed (to name a missing function or a syntax
error in one line); it runs in the sandbox alone (`judging`). Every failure is one `PackError`.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from swarmrl.configs.task_packs import PackLimitsConfig
from swarmrl.tasks.code_tests import parse_python
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import MANIFEST, PROMPTS, REFERENCES, VERIFIER, PackFiles, read_pack_files
from swarmrl.tasks.packs.manifest import Manifest, parse_manifest
from swarmrl.tasks.packs.rows import PackRow, parse_references, parse_rows
from swarmrl.tasks.packs.signing import check_signature


@dataclass(frozen=True)
class TaskPack:
    origin: str
    manifest: Manifest
    digest: str  # the signed content digest: the pack's id
    rows: tuple[PackRow, ...]
    references: Mapping[str, tuple[str, ...]]
    verifier_source: str | None  # None for a code_tests pack
    total_bytes: int

    @property
    def referenced_rows(self) -> int:
        return sum(1 for row in self.rows if row.row_id in self.references)


def load_pack(path: str | Path, limits: PackLimitsConfig) -> TaskPack:
    """The pack at `path` (a directory or a .tar.gz), or PackError naming what is wrong with it."""
    return pack_from_files(read_pack_files(path, limits), limits)


def pack_from_files(files: PackFiles, limits: PackLimitsConfig) -> TaskPack:
    origin = files.origin
    manifest = parse_manifest(files.text(MANIFEST), f"{origin}/{MANIFEST}")
    digest = check_signature(files, manifest.author)
    rows = parse_rows(files.require(PROMPTS), manifest, limits, f"{origin}/{PROMPTS}")
    references_file = files.get(REFERENCES)
    references = (
        parse_references(references_file, rows, limits, f"{origin}/{REFERENCES}")
        if references_file is not None
        else {}
    )
    return TaskPack(
        origin,
        manifest,
        digest,
        tuple(rows),
        references,
        _verifier_source(files, manifest, limits),
        sum(len(data) for data in files.files.values()),
    )


def _verifier_source(files: PackFiles, manifest: Manifest, limits: PackLimitsConfig) -> str | None:
    where = f"{files.origin}/{VERIFIER}"
    if manifest.verifier.kind == "code_tests":
        if files.get(VERIFIER) is not None:
            raise PackError(
                f"{where}: a code_tests pack has no verifier of its own (the code judge runs its tests)"
            )
        return None
    size = len(files.require(VERIFIER))
    if size > limits.max_verifier_bytes:
        raise PackError(f"{where}: {size} bytes, over the cap of {limits.max_verifier_bytes}")
    source = files.text(VERIFIER)
    try:
        module = parse_python(source)
    except SyntaxError as exc:
        raise PackError(f"{where} line {exc.lineno}: invalid python ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise PackError(f"{where}: not parseable python ({type(exc).__name__})") from None
    if manifest.verifier.function not in _module_names(module):
        raise PackError(f"{where}: defines no function {manifest.verifier.function!r} at module level")
    return source


def _module_names(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names
