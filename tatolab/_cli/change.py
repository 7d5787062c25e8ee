"""`tatolab node add|rm` and `tatolab link add|rm`: change a running stream's graph, as an agent does over MCP."""

from __future__ import annotations

import argparse
import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._control.client import Client
from tatolab._control.words import reason_words

KEPT_NOTE = "a live change: {stream} is kept, and loads as recorded after a restart"


def _kept(result: dict[str, Any]) -> None:
    if result["kept"]:
        print(KEPT_NOTE.format(stream=result["stream"]))


def _started(result: dict[str, Any]) -> str:
    """running in its own process (pid 4242), ready in 180 ms"""
    pid = f" (pid {result['pid']})" if result.get("pid") else ""
    took = f" in {result['start_ms']:g} ms" if result.get("start_ms") is not None else ""
    state = {"ready": f"ready{took}", "waiting": f"set up{took}, waiting for bags on its inputs",
             "starting": f"still starting (`tatolab graph --stream {result['stream']}` shows when it runs)",
             "stopped": "stopped again meanwhile"}
    return f"running in its own process{pid}, {state.get(result.get('state', ''), result.get('state'))}"


def cmd_node_add(args: argparse.Namespace) -> int:
    config = None
    if args.config is not None:
        try:
            config = json.loads(args.config)
        except ValueError as exc:
            return fail(f"--config is not JSON ({exc}); write it like --config '{{\"threshold\": 0.5}}'")
        if not isinstance(config, dict):
            return fail(f"--config is a JSON object of the node's config fields, not {args.config}")
    result = Client().request("add_node", stream=args.stream, name=args.name, node_class=args.node_class,
                              config=config)
    stream, node = result["stream"], result["node"]
    inputs = ", ".join(f"{p['port']} ({p['delivery_profile']})" for p in result["inputs"]) or "none"
    outputs = ", ".join(f"{stream}/{node}/{p}" for p in result["outputs"]) or "none"
    print(f"{node} added to stream {stream} ({result['node_class']}), {_started(result)}; "
          f"inputs: {inputs}; outputs: {outputs}")
    if result["inputs"]:
        print(f"link it: `tatolab link add <output address> {stream}/{node}/{result['inputs'][0]['port']}`")
    _kept(result)
    return 0


def cmd_node_rm(args: argparse.Namespace) -> int:
    result = Client().request("remove_node", stream=args.stream, name=args.name)
    links = f" and its links {', '.join(result['links'])}" if result["links"] else ""
    print(f"{result['node']} removed from stream {result['stream']}{links}")
    _kept(result)
    return 0


def _input(text: str) -> tuple[str, str] | None:
    """``<stream>/<node>/<port>`` as the stream and ``<node>/<port>``."""
    parts = text.strip().strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return parts[0], f"{parts[1]}/{parts[2]}"


def _link(args: argparse.Namespace, op: str, done: str) -> int:
    where = _input(args.input)
    if where is None:
        return fail(f"{args.input!r} is not an input address: write <stream>/<node>/<port>, "
                    "e.g. counting/probe/numbers")
    stream, port = where
    result = Client().request(op, stream=stream, output=args.output, input=port)
    state = f"; waiting: {reason_words(result)}" if result["state"] == "waiting" else ""
    print(f"link {result['link']} {done} in stream {result['stream']}{state}")
    _kept(result)
    return 0


def cmd_link_add(args: argparse.Namespace) -> int:
    return _link(args, "connect", "added")


def cmd_link_rm(args: argparse.Namespace) -> int:
    return _link(args, "disconnect", "removed")


def register(commands: Any) -> None:
    node = add(commands, "node")
    nodes = node.add_subparsers(dest="node_command", required=True, metavar="add|rm")
    adding = nodes.add_parser("add", help="add a node and start it in its own process, unlinked")
    adding.add_argument("stream")
    adding.add_argument("name", help="the node's name (URL-safe: part of its addresses)")
    adding.add_argument("node_class", metavar="class",
                        help="a built-in's name (TestPatternSource) or module:Class from the project's .venv")
    adding.add_argument("--config", help="the node's config as a JSON object")
    adding.set_defaults(func=cmd_node_add)
    rm = nodes.add_parser("rm", help="stop a node and remove it with its links")
    rm.add_argument("stream")
    rm.add_argument("name")
    rm.set_defaults(func=cmd_node_rm)

    link = add(commands, "link")
    links = link.add_subparsers(dest="link_command", required=True, metavar="add|rm")
    for verb, func, does in (("add", cmd_link_add, "link an output to an input, at once"),
                             ("rm", cmd_link_rm, "remove a link, at once")):
        sub = links.add_parser(verb, help=does)
        sub.add_argument("output", help="<stream>/<node>/<port>: the same stream's output, or another "
                                        "stream's exposed output")
        sub.add_argument("input", help="<stream>/<node>/<port>: the input that reads it")
        sub.set_defaults(func=func)
