"""`tatolab trust PATH`: run a project another user owns (or others may write to) as you, on purpose."""

from __future__ import annotations

import argparse
import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._control.client import Client


def cmd_trust(args: argparse.Namespace) -> int:
    path = None if args.path is None else args.path if args.path == "*" else os.path.abspath(args.path)
    result = Client().request("trust", path=path, remove=args.remove)
    if path is None:
        print("\n".join(result["trusted"]) if result["trusted"] else "no project is trusted beyond its owner's own")
    elif args.remove:
        print(f"{path} is no longer trusted" if result["changed"] else f"{path} was not on the list")
    else:
        print(f"{path} is trusted to run as you" + ("" if result["changed"] else " (it was already)"))
    return 0


def register(commands: Any) -> None:
    trust = add(commands, "trust")
    trust.add_argument("path", nargs="?", help="the project folder (what is inside it too; '*': every project)")
    trust.add_argument("--remove", action="store_true", help="take PATH off the list")
    trust.set_defaults(func=cmd_trust)
