"""Every command of `tatolab`: the module that defines it, and its line in `tatolab --help`.

`tatolab --help` (and a mistyped or missing command) is answered from this table alone, without
importing the modules that define the commands; `tatolab run ...` imports only its own. A module's
`register` adds each of its commands with `add`, which takes the line from here.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    import argparse
    from typing import Any

# command -> (the module under tatolab._cli that registers it, its line in help), in help's order
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("streams", 'load a stream attached (or kept with -d)'),
    "streams": ("streams", 'list the streams on this machine'),
    "stop": ("streams", 'unload a stream'),
    "dev": ("dev", 'load a stream attached, and again every time a .py file or pyproject.toml is saved'),
    "new": ("new", 'create a project folder (stream.py, nodes/, pyproject.toml, .venv) ready for `tatolab dev`'),
    "sdk": ("sdk", "install the runtime's own SDK into a project's .venv (no package index needed)"),
    "graph": ("inspect", 'print the live graph (nodes, links, counters) as JSON'),
    "tap": ("inspect", 'print the bags an output sends, without slowing it'),
    "logs": ("inspect", "read or follow a stream's log"),
    "top": ("top", "watch every node's CPU, memory, bag rates and bag ages, and the slowest paths, refreshed every second"),
    "exchange": ("exchange", 'save the frames a video output carries as PNGs, with no window needed'),
    "record": ("record", 'record outputs into an MCAP file (Foxglove opens it)'),
    "foxglove": ("foxglove", 'print the link that opens the exposed outputs in the Foxglove app, live; --play FILE.mcap'),
    "start": ("kept", 'load a stopped kept stream again, or retry a failed one'),
    "rm": ("kept", 'stop a kept stream and forget it'),
    "expose": ("expose", 'change who may read an output: <stream>/<node>/<port>'),
    "url": ("expose", "print an exposed output's MoQ URL (with its token) and the certificate fingerprint"),
    "token": ("expose", 'the public tokens `url --public` minted: list, revoke one, rotate the key'),
    "relay": ("expose", "publish this machine's public outputs into a MoQ relay on the internet"),
    "node": ("change", 'add a node to a running stream, or remove one (live)'),
    "link": ("change", 'link an output to an input of a running stream, or unlink (live)'),
    "service": ("service", 'run the runtime as a systemd user service (Linux)'),
    "mcp": ("mcp", "serve this machine's runtime to an agent over MCP on stdin/stdout (`claude mcp add tatolab -- tatolab mcp`)"),
    "enable-virtual-camera": ("camera", 'set up v4l2loopback once, for VirtualCameraSink (Linux)'),
    "trust": ("trust", 'run a project another user owns (or others may write to) as you; no PATH: the list'),
}


def add(commands: Any, name: str, **options: Any) -> argparse.ArgumentParser:
    """Add command ``name`` to ``commands`` (the subparsers of `tatolab`), with its line from COMMANDS."""
    parser: argparse.ArgumentParser = commands.add_parser(name, help=COMMANDS[name][1], **options)
    return parser
