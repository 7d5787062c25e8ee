"""`tatolab sdk DIR`: the runtime's own SDK in a project's ``.venv``, with no package index.

Until Tatolab is published, the package index's ``tatolab`` is an unrelated placeholder, so
``pip install tatolab`` and ``uv add tatolab`` lead nowhere. The runtime carries its SDK
instead: its installed files packed back into wheels (wheels.py), installed with pip's
``--no-index``. The tatolab wheel is also kept in the state folder (``sdk/<contents>/``), and a project's
``pyproject.toml`` points uv at it (``[tool.uv.sources]``), so ``uv sync`` and ``uv add``
install the runtime's SDK and never resolve ``tatolab`` from an index.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab import __version__
from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._control import paths

SOURCES_HEADER = "[tool.uv.sources]"
SOURCES_COMMENT = "# the runtime's own SDK (`tatolab sdk` keeps it): the package index's tatolab is a placeholder"


def kept_wheel_dir() -> Path:
    return paths.state_dir() / "sdk"


def _record(wheel: Path) -> bytes:
    """The wheel's RECORD: every file's hash, so it names the contents (the zip's time stamps aside)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"tatolab-{__version__}.dist-info/RECORD")


def keep_sdk_wheel() -> Path:
    """This runtime's tatolab wheel in the state folder, under a folder named by its contents.

    A kept wheel is never rewritten: uv.lock records its hash, so a project keeps working with
    the wheel it was made with, and a runtime whose code changed without a new version (a
    source checkout) keeps its wheel beside the older ones.
    """
    import hashlib
    import tempfile
    from tatolab._cli.wheels import pack_tatolab

    folder = kept_wheel_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tatolab-wheel-", dir=folder) as scratch:
        fresh = pack_tatolab(Path(scratch))
        kept = folder / hashlib.sha256(_record(fresh)).hexdigest()[:16] / fresh.name
        if not kept.is_file():
            kept.parent.mkdir(mode=0o700, exist_ok=True)
            os.replace(fresh, kept)
    return kept


def uv_source_line(wheel: Path) -> str:
    return f"tatolab = {{ path = {json.dumps(str(wheel))} }}"


def point_uv_at(pyproject: Path, wheel: Path) -> str | None:
    """Make ``pyproject`` resolve tatolab to ``wheel`` for uv; what was done, or None if it
    could not be done safely (then the caller prints the line to add)."""
    text = pyproject.read_text(encoding="utf-8")
    line = uv_source_line(wheel)
    if SOURCES_HEADER not in text:
        pyproject.write_text(text.rstrip("\n") + f"\n\n{SOURCES_HEADER}\n{SOURCES_COMMENT}\n{line}\n",
                             encoding="utf-8")
        return f"pointed uv at it in {pyproject} ([tool.uv.sources])"
    section = re.search(r"^\[tool\.uv\.sources\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if section is None:
        return None
    existing = re.search(r"^tatolab\s*=.*$", section.group(1), re.M)
    if existing is None:
        header_end = section.start(1)
        pyproject.write_text(text[:header_end] + f"\n{line}" + text[header_end:], encoding="utf-8")
        return f"pointed uv at it in {pyproject} ([tool.uv.sources])"
    if existing.group(0) == line:
        return f"{pyproject} already points uv at it"
    start = section.start(1) + existing.start(0)
    pyproject.write_text(text[:start] + line + text[start + len(existing.group(0)):], encoding="utf-8")
    return f"pointed uv at it in {pyproject} (it named another tatolab wheel)"


def _has_pip(python: Path) -> bool:
    import subprocess

    return subprocess.run([str(python), "-m", "pip", "--version"], stdin=subprocess.DEVNULL,
                          capture_output=True).returncode == 0


def install_sdk(project: Path, also: tuple[str, ...] = ()) -> None:
    """``project/.venv`` (created if missing) holding this runtime's SDK, without a package index,
    and the distributions named in ``also`` (numpy for frame.cpu()) as the runtime has them."""
    import subprocess
    import tempfile
    import venv
    from importlib import metadata
    from tatolab._cli.wheels import WheelError, pack_installed, pack_sdk

    venv_dir = project / ".venv"
    python = venv_dir / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True, symlinks=True).create(venv_dir)
    elif not _has_pip(python):  # made by uv, which leaves pip out
        subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="tatolab-wheels-") as wheel_dir:
        pack_sdk(Path(wheel_dir))
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check",
             "--force-reinstall", "--no-deps", "--find-links", wheel_dir, f"tatolab=={__version__}"],
            check=True, stdin=subprocess.DEVNULL,
        )
        subprocess.run(  # its dependencies, where the .venv lacks them
            [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check",
             "--find-links", wheel_dir, f"tatolab=={__version__}"],
            check=True, stdin=subprocess.DEVNULL,
        )
        wanted = [name for name in also if not _has(python, name)]
        if wanted:
            try:
                for name in wanted:
                    pack_installed(name, Path(wheel_dir))
            except metadata.PackageNotFoundError as exc:
                raise WheelError(f"{exc.name} is not installed beside the runtime; install tatolab[runtime]") from None
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check",
                 "--no-deps", "--find-links", wheel_dir, *wanted],
                check=True, stdin=subprocess.DEVNULL,
            )


def _has(python: Path, name: str) -> bool:
    import subprocess

    return subprocess.run([str(python), "-c", f"import {name}"], stdin=subprocess.DEVNULL,
                          capture_output=True).returncode == 0


def wanted_by(pyproject: Path) -> tuple[str, ...]:
    """numpy, when the project's pyproject.toml depends on it (video nodes reading frame.cpu())."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return ()
    return ("numpy",) if re.search(r"""["']numpy\b""", text) else ()


def cmd_sdk(args: argparse.Namespace) -> int:
    import subprocess
    from tatolab._cli.wheels import WheelError

    project = Path(args.dir).expanduser().absolute()
    if not project.is_dir():
        return fail(f"{project} is not a folder; `tatolab new {args.dir}` makes a project there")
    print(f"installing tatolab {__version__} into {project / '.venv'} (offline, from the runtime's own install)",
          flush=True)
    try:
        install_sdk(project, also=wanted_by(project / "pyproject.toml"))
        wheel = keep_sdk_wheel()
    except (WheelError, subprocess.CalledProcessError, OSError) as exc:
        return fail(f"could not install the SDK into {project / '.venv'}: {exc}")
    print(f"{project / '.venv'} has tatolab {__version__}")
    pyproject = project / "pyproject.toml"
    if pyproject.is_file():
        done = point_uv_at(pyproject, wheel)
        if done is None:
            print(f"for uv, add this line under [tool.uv.sources] in {pyproject}:\n  {uv_source_line(wheel)}")
        else:
            print(f"{done}: `uv sync` and `uv add` install this SDK, never the package index's tatolab")
    return 0


def register(commands: Any) -> None:
    sdk = add(
        commands, "sdk",
        description="Install the SDK of the runtime's own version into DIR/.venv, creating it if needed, "
                    "from the runtime's install: no package index, no network. If DIR has a pyproject.toml, "
                    "it also points uv at the runtime's SDK wheel ([tool.uv.sources]), so `uv sync` and "
                    "`uv add` keep it.",
    )
    sdk.add_argument("dir", nargs="?", default=".", help="the project folder (default: this folder)")
    sdk.set_defaults(func=cmd_sdk)
