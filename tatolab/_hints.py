"""Install hints: what to run when a package is missing from a project's ``.venv``, with uv and
with plain pip (a project need not use uv), and one line for a module that is not installed."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

# import names whose package on the index is named otherwise
PACKAGE_NAMES = {"cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn",
                 "skimage": "scikit-image", "serial": "pyserial", "usb": "pyusb", "zmq": "pyzmq"}


def install_hint(*packages: str) -> str:
    """``uv add numpy soxr`` in the project, or ``.venv/bin/pip install numpy soxr``."""
    names = " ".join(packages)
    return f"`uv add {names}` in the project, or `.venv/bin/pip install {names}` there"


def _shown(path: Path, project: Path) -> str:
    try:
        return path.relative_to(project).as_posix()
    except ValueError:
        return str(path)


def missing_module_line(exc: BaseException, project: str | os.PathLike[str],
                        sources: str | None = None) -> str | None:
    """One line for a ModuleNotFoundError that a missing package explains: which module of the
    project imports it, the ``.venv`` it is missing from, and both install commands. None when the
    missing module is the project's own, or tatolab (the runtime says how to install its SDK).
    ``sources``: the kept copy of the project's modules a kept stream's nodes import instead."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    root = Path(project).resolve()
    if top == "tatolab" or (root / f"{top}.py").exists() or (root / top).is_dir():
        return None
    venv = Path(sys.prefix)
    if (root / ".venv").resolve() == venv.resolve():  # the project's own .venv, however this interpreter reached it
        venv = root / ".venv"
    copy = Path(sources).resolve() if sources else root
    importer = deepest = None
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        if not path.is_absolute() or not path.exists() or "importlib" in path.parts:
            continue
        real = path.resolve()
        where = f"{_shown(real, copy if real.is_relative_to(copy) else root)}, line {frame.lineno}"
        deepest = deepest or where
        if (real.is_relative_to(root) or real.is_relative_to(copy)) and not real.is_relative_to(venv.resolve()):
            importer = where  # the project's own module that imports it
            break
    importer = importer or deepest
    package = PACKAGE_NAMES.get(top, top)
    named = f" (the package {package} provides {top})" if package != top else ""
    where = f"{importer} imports" if importer else "the project imports"
    pip = f"{_shown(venv, root)}/bin/pip install {package}"
    return (f"{where} {top}, which is not installed in {venv}{named}: "
            f"`uv add {package}` in {root}, or `{pip}`")
