"""Watching a project for saves, for `tatolab dev`.

Which paths count is a plain rule (rules/saves.py); the watching itself is watchfiles. Each
project folder is watched on its own, non-recursively, so ignored folders (a ``.venv`` holds
thousands) never cost an inotify watch; a folder created later is picked up by walking the
project again after each batch of changes.
"""

from __future__ import annotations

import os
import threading
from contextlib import aclosing
from pathlib import Path
from typing import AsyncIterator

from watchfiles import Change, awatch

from tatolab._runtime.rules.saves import IGNORED_DIRS, is_watched

# watchfiles yields a batch once STEP_MS pass without a *new* (kind, path) pair, so ten saves
# of one file arrive as several batches; dev then waits for QUIET_MS without any batch, which
# makes a burst of saves (an editor writing several files, a git checkout) one reload.
STEP_MS = 30
QUIET_MS = 90
DEBOUNCE_MS = 1600
RUST_TIMEOUT_MS = 1000


def _ignored_dir(path: str) -> bool:
    """A folder dev never looks into: the ignored names, and any other virtual environment."""
    name = os.path.basename(path)
    return name in IGNORED_DIRS or os.path.exists(os.path.join(path, "pyvenv.cfg"))


def watched_dirs(project: Path) -> list[str]:
    """The project folder and every folder below it that dev watches (symlinks not followed)."""
    found = []
    for root, dirs, _ in os.walk(project):
        found.append(root)
        dirs[:] = sorted(d for d in dirs if not _ignored_dir(os.path.join(root, d)))
    return found


def _watched_files_in(project: Path, directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [path for path in (os.path.join(directory, n) for n in names) if is_watched(project, path)]


async def project_changes(project: Path, stop: threading.Event) -> AsyncIterator[list[str]]:
    """Yield, per burst of saves, the sorted project-relative paths that changed, until ``stop`` is set."""
    project = project.resolve()

    def wanted(change: Change, path: str) -> bool:
        if change == Change.added and os.path.isdir(path):
            return True  # a new folder: walk again to watch it
        return is_watched(project, path)

    while not stop.is_set():
        dirs = watched_dirs(project)
        watcher = awatch(
            *dirs, watch_filter=wanted, recursive=False, debounce=DEBOUNCE_MS, step=STEP_MS,
            stop_event=stop, rust_timeout=RUST_TIMEOUT_MS, ignore_permission_denied=True,
        )
        async with aclosing(watcher):
            async for batch in watcher:
                changed = {path for _, path in batch if is_watched(project, path)}
                now = watched_dirs(project)
                for new_dir in set(now) - set(dirs):  # files that arrived before we watched their folder
                    changed.update(_watched_files_in(project, new_dir))
                if changed:
                    yield sorted(os.path.relpath(path, project) for path in changed)
                if now != dirs:
                    break
