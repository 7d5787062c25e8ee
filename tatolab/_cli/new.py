"""`tatolab new DIR`: an ordinary project, ready for `cd DIR && tatolab dev`.

It writes ``stream.py``, ``nodes/`` (one example node in its own module), ``pyproject.toml``
depending on ``tatolab``, and ``.gitignore``, then creates ``.venv`` holding the SDK of the
same version as the runtime, installed offline from wheels packed out of the runtime's own
environment (see wheels.py). It never overwrites: if any of those paths exists, it stops
before writing anything.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab import __version__
from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._cli.sdk import SOURCES_COMMENT, install_sdk, keep_sdk_wheel, uv_source_line

TEMPLATES = {
    # path in the project: template (under tatolab/_cli/templates/)
    "basic": {
        "stream.py": "basic/stream.py.tmpl",
        "nodes/__init__.py": "common/nodes_init.py.tmpl",
        "nodes/ticker.py": "basic/nodes/ticker.py.tmpl",
        "pyproject.toml": "common/pyproject.toml.tmpl",
        ".gitignore": "common/gitignore.tmpl",
    },
    "test_pattern": {
        "stream.py": "test_pattern/stream.py.tmpl",
        "nodes/__init__.py": "common/nodes_init.py.tmpl",
        "nodes/pattern.py": "test_pattern/nodes/pattern.py.tmpl",
        "pyproject.toml": "common/pyproject.toml.tmpl",
        ".gitignore": "common/gitignore.tmpl",
    },
}


# what a template's nodes import beside tatolab, installed from the runtime's own environment
ALSO_INSTALLED = {"test_pattern": ("numpy",)}


def function_name(folder: str) -> str:
    """A Python identifier for the stream function, from the project folder's name."""
    import keyword
    import unicodedata

    ascii_name = unicodedata.normalize("NFKD", folder).encode("ascii", "ignore").decode().lower()
    name = re.sub(r"[^a-z0-9_]+", "_", ascii_name).strip("_") or "my_stream"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"stream_{name}"
    return name


def render(kind: str, folder: str, sdk_wheel: Path = Path("tatolab.whl")) -> dict[str, str]:
    """The project's files, path -> text; pyproject.toml points uv at ``sdk_wheel``."""
    from importlib import resources

    values = {
        "sources_comment": SOURCES_COMMENT,
        "tatolab_source": uv_source_line(sdk_wheel),
        "function": function_name(folder),
        "more_dependencies": "".join(f', "{name}"' for name in ALSO_INSTALLED.get(kind, ())),
        "project": re.sub(r"[^A-Za-z0-9._-]+", "-", folder).strip("-.") or "my-stream",
        "version": __version__,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    root = resources.files("tatolab._cli") / "templates"
    return {path: (root / template).read_text(encoding="utf-8").format(**values)
            for path, template in TEMPLATES[kind].items()}


def collisions(target: Path, files: dict[str, str]) -> list[str]:
    """What is already there among the paths `new` would write (files, and .venv)."""
    taken = [path for path in [*files, ".venv"] if (target / path).exists() or (target / path).is_symlink()]
    if (target / "nodes").exists() and not (target / "nodes").is_dir():
        taken.append("nodes")
    return taken


def cmd_new(args: argparse.Namespace) -> int:
    import subprocess
    from tatolab._cli.wheels import WheelError

    target = Path(args.dir).expanduser().absolute()
    if target.exists() and not target.is_dir():
        return fail(f"{target} is a file; pick a folder name for the new project")
    files = render("test_pattern" if args.test_pattern else "basic", target.name)
    taken = collisions(target, files)
    if taken:
        return fail(
            f"{target} already has {', '.join(taken)}; `tatolab new` never overwrites: "
            "pick a new folder, or move those away first"
        )
    try:
        sdk_wheel = keep_sdk_wheel()
    except (WheelError, OSError) as exc:
        return fail(f"could not keep the runtime's SDK wheel for the project: {exc}")
    files = render("test_pattern" if args.test_pattern else "basic", target.name, sdk_wheel)
    for path, text in files.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        with open(target / path, "x", encoding="utf-8") as out:  # "x": never overwrite, even in a race
            out.write(text)
    print(f"wrote {', '.join(files)} in {target}", flush=True)
    print(f"creating {target / '.venv'} with tatolab {__version__} (offline, from the runtime's own install)",
          flush=True)
    try:
        install_sdk(target, also=ALSO_INSTALLED.get("test_pattern" if args.test_pattern else "basic", ()))
    except (WheelError, subprocess.CalledProcessError, OSError) as exc:
        return fail(f"could not create {target / '.venv'}: {exc}; the project files are written, so "
                    f"`tatolab sdk {target}` finishes it once that is fixed")
    print(f"ready: cd {target} && tatolab dev", flush=True)
    return 0


def register(commands: Any) -> None:
    new = add(
        commands, "new",
        description="Create a project: stream.py, nodes/ with one example node, pyproject.toml depending on "
                    "tatolab, .gitignore, and a .venv holding the SDK of the runtime's own version (installed "
                    "without a package index). Refuses to overwrite anything already there.",
    )
    new.add_argument("dir", help="the project folder to create (it may exist, but not hold these files)")
    new.add_argument(
        "--test-pattern", action="store_true",
        help="start from the built-in TestPatternSource (colour bars and a moving square, 30 frames a "
             "second) and a Python node that reads its frames")
    new.set_defaults(func=cmd_new)
