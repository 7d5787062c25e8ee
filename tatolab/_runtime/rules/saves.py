"""Which saved files count for `tatolab dev`: a plain rule over paths (watch.py does the watching)."""

from __future__ import annotations

from pathlib import Path

IGNORED_DIRS = frozenset({".venv", ".git", "__pycache__", ".streamlib"})
WATCHED_NAMES = frozenset({"pyproject.toml"})
# Python, and GLSL a GlslPixelEffect reads from a file (path=...)
WATCHED_SUFFIXES = (".py", ".glsl", ".frag")


def is_watched(project: Path, path: str) -> bool:
    """True for a ``.py`` or shader file or ``pyproject.toml`` inside ``project``, outside ignored folders."""
    try:
        relative = Path(path).relative_to(project)
    except ValueError:
        return False
    if any(part in IGNORED_DIRS for part in relative.parts[:-1]):
        return False
    name = relative.name
    return name.endswith(WATCHED_SUFFIXES) or name in WATCHED_NAMES
