"""`tatolab mcp`: serve the runtime's operations to an agent over MCP on stdin/stdout."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add


def cmd_mcp(args: argparse.Namespace) -> int:
    from tatolab._mcp.server import main  # here: the other commands never load the MCP SDK

    return main()


def register(commands: Any) -> None:
    mcp = add(commands, "mcp")
    mcp.set_defaults(func=cmd_mcp)
