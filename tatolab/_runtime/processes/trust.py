"""Which projects may run as you: git's answer to "dubious ownership" (its safe.directory).

A stream's code runs with the rights of the user whose runtime runs it. So a project whose folder,
stream file, any folder or module Python can import from it (``nodes/``, packages, ``__pycache__``),
or anything in its ``.venv`` (``pyvenv.cfg``, site-packages, ``.pth`` files and the folders they add)
another user owns, or every user may write to, is refused before
any of its code runs (compiling it, starting it, a kept stream at every restart), naming the owner
and the fix: ``chown`` it, or trust it explicitly with ``tatolab trust PATH`` (kept in the state
folder) or ``TATOLAB_TRUST`` (the runtime's environment, or the loading command's, which a kept
stream records). The check is the runtime's, so the CLI, MCP and kept streams all meet it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from tatolab import _settings as settings
from tatolab._control import paths
from tatolab._control.errors import ControlError, Fix
from tatolab._control.source import StreamSource
from tatolab._safe_fs import open_own_file, owner_name, write_private_file

TRUSTED_FILE = "trusted"  # in the state folder: one trusted path a line
EVERYWHERE = "*"  # trusts every project (as git's safe.directory=*)
VENV = ".venv"
CODE = (".py", ".pyc", ".pyw", ".so", ".pth")  # files Python imports or reads as code
MAX_ENTRIES = 500_000  # a .venv with torch and CUDA is ~60,000


def trusted_paths(env: Mapping[str, str] | None = None, state: Path | None = None) -> list[str]:
    """Every path trusted: ``tatolab trust``'s list, the runtime's TATOLAB_TRUST, and the loading command's."""
    found = list(read_trusted(state))
    found += settings.value("TATOLAB_TRUST")  # checked as tatolabd started
    if env is not None:
        try:
            found += settings.value("TATOLAB_TRUST", env)
        except settings.SettingError as exc:
            raise ControlError(str(exc)) from None
    return found


def read_trusted(state: Path | None = None) -> list[str]:
    path = (state or paths.state_dir()) / TRUSTED_FILE
    try:
        fd = open_own_file(path, os.O_RDONLY, "your list of trusted projects")
    except FileNotFoundError:
        return []
    with os.fdopen(fd, encoding="utf-8") as file:
        return [line.strip() for line in file if line.strip()]


def write_trusted(entries: Iterable[str], state: Path | None = None) -> None:
    """Replace the list (0600, in the user's own 0700 state folder: nobody else can swap it)."""
    path = (state or paths.state_dir()) / TRUSTED_FILE
    text = "".join(f"{entry}\n" for entry in dict.fromkeys(entries))
    write_private_file(path, text.encode("utf-8"), "your list of trusted projects")


def is_trusted(project: Path, trusted: Iterable[str]) -> bool:
    for entry in trusted:
        if entry == EVERYWHERE:
            return True
        root = Path(os.path.realpath(entry))
        if project == root or root in project.parents:
            return True
    return False


def why_dubious(path: Path) -> str | None:
    """Why code at ``path`` (followed if a link) must not run as this user, or None: it belongs to
    another user (root is trusted, as by every user already), or other users may write to it."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return _why(info)


def _why(info: os.stat_result) -> str | None:
    if info.st_uid not in (os.getuid(), 0):
        return f"belongs to {owner_name(info.st_uid)}"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o002:
        return f"can be written by every user (mode {mode:o})"
    if mode & 0o020 and info.st_gid not in (os.getgid(), 0):
        return f"can be written by group {_group(info.st_gid)} (mode {mode:o})"
    return None


def _group(gid: int) -> str:
    import grp

    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def _module_paths(project: Path, module: str) -> list[Path]:
    """The folders and files in ``project`` that ``import module`` goes through (nothing when the
    module is not in the project: then it is the .venv's, which is checked itself)."""
    found, here = [], project
    for part in module.split("."):
        folder, file = here / part, here / f"{part}.py"
        if folder.is_dir():
            found += [folder, folder / "__init__.py"]
            here = folder
        elif file.exists():
            return found + [file]
        else:
            return found if here != project else []
    return found


def checked_paths(project: Path, source: StreamSource | None) -> list[Path]:
    """What is run of ``project``: the folder, its stream file or target module, its .venv and interpreter."""
    found = [project]
    target, file = (source.target, source.file) if source is not None else (None, None)
    where = file or (target.rpartition(":")[0] or target if target else None) or "stream.py"
    if file or where.endswith(".py") or "/" in where:
        found.append(project / where)
    else:
        found += _module_paths(project, where)
    venv = project / ".venv"
    found += [venv, venv / "bin", venv / "bin" / "python"]
    return found


def _dubious_below(folder: Path, everything: bool) -> Iterator[tuple[Path, str]]:
    """(path, why) for each entry below ``folder`` that must not run as this user (``_why``).

    ``everything`` (a .venv): every folder, every file of code, pyvenv.cfg and every program, and the folders its ``.pth`` files add to
    ``sys.path``. Else (the project's own code): every folder Python can import from (a name that
    is an identifier, ``__pycache__`` too) and every file of code in them (``CODE``). A link is
    judged by its target, and a linked folder walked once."""
    seen: set[tuple[int, int]] = set()
    folders = [folder]
    checked = 0
    while folders:
        here = folders.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        checked += len(entries)
        if checked > MAX_ENTRIES:  # a link to / in a package folder, say: judged as a whole, not walked for ever
            yield here, (f"leads to more than {MAX_ENTRIES:,} files and folders Python could import from "
                         "(a link out of the project?), more than Tatolab checks")
            return
        for entry in entries:
            try:
                is_folder = entry.is_dir()
                if not everything and not (entry.name.isidentifier() if is_folder else entry.name.endswith(CODE)):
                    continue
                info = entry.stat()
            except OSError:  # gone, or a link to nothing: nothing of it can run
                continue
            if everything and not is_folder and not _venv_code(entry.name, info):
                continue  # data beside the code (uv's .lock is made writable by all): never run
            why = _why(info)
            if why is not None:
                yield Path(entry.path), why
            if is_folder and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                folders.append(Path(entry.path))
            elif everything and why is None and entry.name.endswith(".pth") and stat.S_ISREG(info.st_mode):
                yield from _pth_folders(Path(entry.path))


def _venv_code(name: str, info: os.stat_result) -> bool:
    """Whether a file of a .venv is one Python runs or reads to know what to run: code, pyvenv.cfg,
    and every program (bin/python, the scripts beside it)."""
    return name.endswith(CODE) or name == "pyvenv.cfg" or bool(info.st_mode & 0o111)


def _pth_folders(pth: Path) -> Iterator[tuple[Path, str]]:
    """The folders a ``.pth`` file adds to ``sys.path`` that must not run as this user (it is read
    only once known to be the user's or root's: ``_why``)."""
    try:
        lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "import ", "import\t")):
            continue
        folder = pth.parent / line
        why = why_dubious(folder)
        if why is not None:
            yield folder, why


def dubious(project: Path, source: StreamSource | None = None) -> Iterator[tuple[Path, str]]:
    """(path, why) for every part of ``project`` that would run and must not run as this user:
    the folder, its stream file or target module, every module and package folder Python can
    import from it (``nodes/``, packages, their ``__pycache__``), and its .venv whole (pyvenv.cfg,
    the interpreter, site-packages, each .pth file and the folders it adds)."""
    for path in checked_paths(project, source):
        why = why_dubious(path)
        if why is not None:
            yield path, why
    yield from _dubious_below(project, everything=False)
    venv = project / VENV
    if venv.is_dir():
        yield from _dubious_below(venv, everything=True)


def check(project: Path, source: StreamSource | None = None, env: Mapping[str, str] | None = None) -> None:
    """Refuse ``project`` (resolved) unless all of it that runs is the user's, or it is trusted.

    ``env``: the loading command's environment (its TATOLAB_TRUST counts)."""
    for path, why in dubious(project, source):
        if is_trusted(project, trusted_paths(env)):
            return
        raise refusal(project, path, why)


async def check_async(project: Path, source: StreamSource | None = None, env: Mapping[str, str] | None = None) -> None:
    """``check`` off the runtime's loop: it walks the project and its .venv (~0.25 s for 11,000
    entries on a busy machine), which must not stall other streams' requests."""
    await asyncio.to_thread(check, project, source, env)


def refusal(project: Path, path: Path, why: str) -> ControlError:
    me = owner_name(os.getuid()).split(" ")[0]
    inside = path == project or project in path.parents
    where = project if inside else path  # a folder a .pth file adds, outside the project
    fix = (f"`chown -R {me} {where}`" if "belongs to" in why else
           "take the link out of it" if "leads to more than" in why else f"`chmod -R go-w {where}`")
    return ControlError(
        f"{path} {why}, so Tatolab will not run {project} as you (its code would run with your rights). "
        f"If it is yours: {fix}. If you trust it as it is: TATOLAB_TRUST={project} in the command's environment",
        code="untrusted", fixes=[Fix("trust", {"path": str(project)}, "or for good")],
        details={"project": str(project), "path": str(path), "why": why})
