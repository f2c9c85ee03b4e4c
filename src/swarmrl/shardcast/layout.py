"""Where things live inside a checkpoint directory and a checkpoint root (shared by origin, relay, client)."""

from __future__ import annotations

from pathlib import Path

META_DIR = ".shardcast"
MANIFEST_NAME = "manifest.json"
DELTA_DIR = f"{META_DIR}/delta"


def manifest_path(version_dir: Path) -> Path:
    return version_dir / META_DIR / MANIFEST_NAME


def delta_payload_path(parent_version: int, file_path: str) -> str:
    """Relative path (inside the version directory) of the delta payload rebuilding `file_path`."""
    return f"{DELTA_DIR}/from_{parent_version}/{file_path}.xorz"


def is_metadata_path(relative: str) -> bool:
    return relative == META_DIR or relative.startswith(META_DIR + "/")


def list_checkpoint_files(version_dir: Path) -> list[str]:
    """Relative POSIX paths of the checkpoint's own files (not shardcast metadata), sorted."""
    files = []
    for path in version_dir.rglob("*"):
        if path.is_file():
            relative = path.relative_to(version_dir).as_posix()
            if not is_metadata_path(relative):
                files.append(relative)
    return sorted(files)
