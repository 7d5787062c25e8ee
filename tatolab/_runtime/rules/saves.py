"""Which saved files count for `tatolab dev`: a plain rule over paths (watch.py does the watching)."""

from __future__ import annotations

from pathlib import Path

IGNORED_DIRS = frozenset({".venv", ".git", "__pycache__", ".streamlib"})
WATCHED_NAMES = frozenset({"pyproject.toml"})
WATCHED_SUFFIX = ".py"


def is_watched(project: Path, path: str) -> bool:
    """True for a ``.py`` file or ``pyproject.toml`` inside ``project``, outside ignored folders."""
    try:
        relative = Path(path).relative_to(project)
    except ValueError:
        return False
    if any(part in IGNORED_DIRS for part in relative.parts[:-1]):
        return False
    name = relative.name
    return name.endswith(WATCHED_SUFFIX) or name in WATCHED_NAMES
