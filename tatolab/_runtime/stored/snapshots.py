"""A kept stream's snapshot of its project's own Python sources, taken at `run -d`.

The node processes of a kept stream import the project's modules from the snapshot, so an
edit to the project changes nothing until `run -d` again (the ``.venv`` still provides the
packages, and the working folder stays the project). Only ``*.py`` files are copied; the other
files and folders beside them are links to the live ones (a model file next to a node module). Snapshots live in
``<state>/sources/<stream>/<version>/``, user-only; the record names the version it uses, so
a crash mid-copy never leaves a record pointing at half a snapshot.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tatolab._control.errors import Fix, Reason

MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024
SUFFIXES = (".py",)


class SnapshotError(Exception):
    """The project's sources cannot be kept; ``reason`` names why and the fix."""

    def __init__(self, reason: Reason | str) -> None:
        self.reason = reason if isinstance(reason, Reason) else Reason(reason)
        super().__init__(self.reason.text)


def _not_the_project(problem: str) -> SnapshotError:
    """Too much to copy: most likely a folder above the project was given."""
    return SnapshotError(Reason(
        f"{problem} to keep a copy of; is it the project folder? Point the project at the folder with stream.py",
        code="not_the_project", fixes=(Fix("load", {"project": None}, "at the folder with stream.py"),),
        details={"problem": problem}))


def _skipped(folder: Path, entry: str) -> bool:
    # hidden folders hold tools' state (.venv, .git, .streamlib, caches), never the project's modules
    return entry.startswith(".") or entry == "__pycache__" or (folder / entry / "pyvenv.cfg").exists()


def plan(project: Path) -> tuple[list[Path], list[Path]]:
    """What a snapshot holds, relative to ``project``: the Python sources to copy (no .venv,
    .git, __pycache__, .streamlib), and the other files and folders beside them to link to the
    live ones, so that data a module finds by ``__file__`` is where it was."""
    sources: list[Path] = []
    walked: dict[Path, tuple[list[str], list[str]]] = {}
    for top, folders, files in os.walk(project):
        here = Path(top)
        folders[:] = sorted(f for f in folders if not _skipped(here, f))
        relative = here.relative_to(project)
        walked[relative] = (list(folders), sorted(files))
        sources += [relative / f for f in sorted(files) if f.endswith(SUFFIXES)]
        if len(sources) > MAX_FILES:
            raise _not_the_project(f"{project} holds more than {MAX_FILES} Python files outside hidden folders, "
                                   "too many")
    holding = {Path(".")} | {parent for source in sources for parent in source.parents}
    links: list[Path] = []
    for folder in sorted(holding):
        folders, files = walked[folder]
        links += [folder / f for f in files if not f.endswith(SUFFIXES)]
        links += [folder / d for d in folders if folder / d not in holding]
    return sources, links


def _private_folder(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if info.st_uid != os.getuid() or not path.is_dir() or path.is_symlink():
        raise SnapshotError(Reason(f"{path} is not a folder of your own; remove it, then keep it again",
                                   code="not_your_folder"))
    os.chmod(path, 0o700)


def take(project: Path, root: Path, name: str) -> Path:
    """Copy ``project``'s Python sources into a new version folder for stream ``name``; returns it."""
    version = root / name / f"{time.time_ns():x}"
    _private_folder(root)
    _private_folder(root / name)
    total = 0
    try:
        version.mkdir(mode=0o700)
        sources, links = plan(project)
        for relative in sources:
            target = version / relative
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                data = (project / relative).read_bytes()
            except OSError as exc:
                raise SnapshotError(f"{project / relative} cannot be read to keep it: {exc.strerror}") from None
            total += len(data)
            if total > MAX_BYTES:
                raise _not_the_project(f"the Python files in {project} add up to more than "
                                       f"{MAX_BYTES // (1024 * 1024)} MiB, too much")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        for relative in links:
            os.symlink(project / relative, version / relative)
    except OSError as exc:
        shutil.rmtree(version, ignore_errors=True)
        raise SnapshotError(f"the project's sources could not be kept in {version}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(version, ignore_errors=True)
        raise
    return version


def prune(root: Path, keep: dict[str, str | None], *, only: str | None = None,
          leave: frozenset[str] = frozenset()) -> list[Path]:
    """Remove every snapshot no record uses: ``keep`` maps each recorded stream to its snapshot
    (a stream not in it loses all of its own, except those in ``leave``); ``only`` limits this
    to one stream's."""
    removed = []
    try:
        names = [only] if only is not None else os.listdir(root)
    except FileNotFoundError:
        return []
    for name in names:
        folder = root / name
        if name in leave:
            continue
        if name not in keep:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            continue
        for version in os.listdir(folder) if folder.is_dir() and not folder.is_symlink() else []:
            if str(folder / version) != keep[name]:
                shutil.rmtree(folder / version, ignore_errors=True)
                removed.append(folder / version)
    return removed


def forget(root: Path, name: str) -> None:
    if name in ("", ".", "..") or "/" in name:
        return  # not a stream name: never a path outside ``root``
    shutil.rmtree(root / name, ignore_errors=True)
