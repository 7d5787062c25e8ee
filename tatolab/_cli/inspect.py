"""`tatolab graph`, `tap` and `logs`: seeing inside running streams."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any, Iterator

from tatolab._control.client import Client
from tatolab._control.words import reason_words
from tatolab._cli.commands import add
from tatolab._cli.arguments import seconds, whole_number
from tatolab._cli.output import fail
from tatolab._control import paths
from tatolab._words import counted


# --- graph -------------------------------------------------------------------------------------

def cmd_graph(args: argparse.Namespace) -> int:
    request = {"stream": args.stream} if args.stream else {}
    print(json.dumps(in_words(Client().request("graph", **request)), indent=2))
    return 0


def in_words(graph: dict[str, Any]) -> dict[str, Any]:
    """The graph as `tatolab graph` prints it: each reason with its fix in the CLI's words (the
    runtime gives the fix as an operation, under ``why``)."""
    for stream in graph.get("streams", []):
        for entry in [stream, *stream.get("links", [])]:
            if "why" in entry:
                entry["reason"] = reason_words(entry)
                del entry["why"]
    return graph


def trouble_lines(nodes: list[dict[str, Any]]) -> list[str]:
    """One line per node in trouble, for under the ``tatolab streams`` table."""
    lines = []
    for node in nodes:
        restarts = node["restarts"]
        state = "hung" if node.get("hung") else node["state"]
        if state == "failed":  # it can never run as configured: its one line says why and the fix
            lines.append(f"{node['stream']}/{node['name']} failed: {node.get('last_error') or 'it cannot run'}. "
                         f"`tatolab logs --stream {node['stream']} --node {node['name']}` shows more.")
            continue
        text = f"{node['stream']}/{node['name']} {state}, restarted {counted(restarts, 'time')}"
        if node.get("last_error"):
            text += f"; last error: {node['last_error'].splitlines()[0]}"
        lines.append(text + f". `tatolab logs --stream {node['stream']} --node {node['name']}` shows more.")
    return lines


# --- tap ---------------------------------------------------------------------------------------

def cmd_tap(args: argparse.Namespace) -> int:
    client = Client()
    try:
        opened = client.request(
            "tap", address=args.address, count=args.count, timeout=args.timeout or None, profile=args.profile
        )
        address = opened["address"]
        started = time.monotonic()
        for event in client.events():
            kind = event.get("event")
            if kind == "bag":
                print(json.dumps({k: event[k] for k in ("n", "ts_ns", "size", "bag")}), flush=True)
            elif kind == "end":
                print(tap_summary(address, event, args.count, time.monotonic() - started), file=sys.stderr)
                short = args.count is not None and event["got"] < args.count
                return 1 if short or event["reason"] == "error" else 0
        return fail("the runtime went away during the tap")
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()  # hanging up releases the tap's reader record


def tap_summary(address: str, end: dict[str, Any], count: int | None, seconds: float) -> str:
    got = end["got"]
    wanted = f" of {count}" if count is not None else ""
    bags = "bag" if (count if count is not None else got) == 1 else "bags"
    line = f"tap: got {got}{wanted} {bags} from {address} in {seconds:.1f} s"
    if end["reason"] == "timeout":
        line += " (timed out)" if got else " (timed out: nothing was written to it meanwhile)"
    elif end["reason"] == "stream stopped":
        line += " (the stream stopped)"
    elif end["reason"] == "error":
        line += f" ({end.get('error')})"
    if end.get("dropped"):
        skipped = end["dropped"]
        line += f"; the tap skipped {counted(skipped, 'bag')}"
    return line


# --- logs --------------------------------------------------------------------------------------

def cmd_logs(args: argparse.Namespace) -> int:
    """One ``logs`` request; with --dir, the same reading here, with no runtime asked."""
    from tatolab import _records

    request = {"stream": args.stream, "node": args.node, "level": args.level, "since": args.since,
               "tail": args.tail, "follow": args.follow}
    client: Client | None = None
    try:
        if args.dir:
            events = _read_here(Path(args.dir).resolve(), request)
        else:
            client = Client()
            events = itertools.chain([client.request("logs", **request)], client.events())
        for event in events:
            if event.get("event") != "line":
                continue
            line = event["line"]
            sys.stdout.write((line if args.json else _records.format_for_terminal(json.loads(line))) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tatolab logs ... | head`
        sys.stderr.close()
        return 0
    finally:
        if client is not None:
            client.close()
    return 0


def _read_here(project: Path, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    import asyncio

    from tatolab._runtime.stored.logread import LogFilter
    from tatolab._runtime.ops.logs import log_events

    keep = LogFilter.of(request["node"], request["level"], request["since"])
    path = paths.stream_log(project, request["stream"])
    events = log_events(request["stream"], path, keep, tail=request["tail"], follow=request["follow"])
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(events))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(events.aclose())
        loop.close()


# --- registration ------------------------------------------------------------------------------

def register(commands: Any) -> None:
    graph = add(commands, "graph")
    graph.add_argument("--stream", help="only this stream")
    graph.set_defaults(func=cmd_graph)

    tap = add(commands, "tap")
    tap.add_argument("address", help="<stream>/<node>/<port> (or <machine>/<stream>/<node>/<port>)")
    tap.add_argument("--count", type=whole_number(1, "a whole number of bags, 1 or more"), help="stop after this many bags")
    tap.add_argument("--timeout", type=seconds("a number of seconds, 0 or more (0: never)"), default=10.0, help="stop after this many seconds (default 10; 0: never)")
    tap.add_argument(
        "--profile", choices=("newest", "ordered"), default="newest",
        help="newest (default): the latest bag each time, skipping; ordered: every bag in order until lapped",
    )
    tap.set_defaults(func=cmd_tap)

    logs = add(commands, "logs")
    logs.add_argument("--stream", required=True, help="the stream whose log to read")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    logs.add_argument("--node", help="only records of this node")
    logs.add_argument("--level", help="only records at this level or above (debug, info, warning, error, critical)")
    logs.add_argument("--since", help="only records since: 30s, 10m, 2h, 1d, or an ISO time")
    logs.add_argument("--json", action="store_true", help="print the records as JSON lines, unchanged")
    logs.add_argument("--tail", type=whole_number(0, "a whole number of records, 0 or more"), help="only the last N matching records (default: all; 20 with -f)")
    logs.add_argument("--dir", help="read the log in this project folder without asking the runtime")
    logs.set_defaults(func=cmd_logs)
