"""`tatolab start` and `tatolab rm`: bringing back and forgetting kept streams (`stop` is in streams.py)."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._control.client import Client
from tatolab._words import counted


def cmd_start(args: argparse.Namespace) -> int:
    result = Client().request("start", name=args.name)
    if result.get("already"):
        print(f"{args.name} is already running (kept, project {result['project']})")
    else:
        how = "retried and running" if result.get("retried") else "started"
        print(f"{args.name} {how} (kept, {counted(result['nodes'], 'node')}, project {result['project']})")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    result = Client().request("rm", name=args.name)
    if result.get("forgotten"):
        print(f"{args.name} removed: stopped and forgotten (project {result['project']})")
    else:
        print(f"{args.name} stopped (it was attached, so there was nothing to forget)")
    return 0


def register(commands: Any) -> None:
    start = add(commands, "start")
    start.add_argument("name")
    start.set_defaults(func=cmd_start)

    rm = add(commands, "rm")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_rm)
