"""Which project a loading command (run, dev) means, and what the folder lacks to be one,
said before asking the runtime.

An empty folder, or a subfolder of a project, has no ``stream.py``: saying so (and how to
make one, or point at the project) helps more than the runtime's hint about its ``.venv``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any


def needed_file(load: dict[str, Any]) -> str | None:
    """The file in the project that ``load`` names (``stream.py`` by default), or None for a module path."""
    if load.get("file"):
        return str(load["file"])
    target = load.get("target")
    if not target:
        return "stream.py"
    where = target.rpartition(":")[0] or target
    if where.endswith(".py") or "/" in where:
        return where
    return None


def _project_above(folder: Path) -> Path | None:
    for parent in folder.parents:
        if (parent / "stream.py").is_file():
            return parent
    return None


def project_problem(load: dict[str, Any], command: str) -> str | None:
    """Why ``tatolab <command>`` cannot load from ``load['project']``, or None."""
    project = Path(load["project"])
    wanted = needed_file(load)
    if wanted is None or (project / wanted).is_file():
        return None
    if wanted != "stream.py" or load.get("file"):
        return f"there is no {wanted} in {project}; check the name, or point at the project with --dir"
    above = _project_above(project)
    if above is not None:
        return (f"there is no stream.py in {project}: it is a folder inside the project {above}. "
                f"Run `tatolab {command}` there, or `tatolab {command} --dir {above}`")
    return (f"there is no stream.py in {project}, so there is no stream to load here. "
            f"`tatolab new {project}` makes a project in this folder, or `--dir` points at a project elsewhere")


class Hangup(Exception):
    """The terminal closed (SIGHUP) or the command was told to end (SIGTERM)."""


def load_request(args: argparse.Namespace) -> dict[str, Any]:
    """The ``load``/``dev`` request's arguments for this command line."""
    from tatolab._control.source import StreamSource  # (dataclasses) only for a command that loads

    source = StreamSource.of(os.path.abspath(args.dir or os.getcwd()), args.target, args.file, args.name)
    # the stream compiles and runs with this command's environment (`CAMERA=/dev/video2 tatolab run`)
    return {**source.args(), "env": dict(os.environ)}


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """Which stream to load: shared by run and dev."""
    parser.add_argument("target", nargs="?", help="stream.py:name, file.py:name or package.module:name")
    parser.add_argument("-f", "--file", help="a file with one @stream")
    parser.add_argument("--dir", help="the project folder (default: this folder)")
    parser.add_argument("--name", help="load the stream under another name")
