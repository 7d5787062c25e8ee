"""`tatolab run`, `streams` and `stop`: loading and unloading streams."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._control.client import Client
from tatolab._control.words import reason_words
from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._cli.project import Hangup, add_load_arguments, load_request, project_problem
from tatolab._words import counted


def cmd_run(args: argparse.Namespace) -> int:
    import signal

    client = Client()  # first: with no runtime, every command says so before anything else
    load = load_request(args)
    problem = project_problem(load, "run")
    if problem:
        client.close()
        return fail(problem)
    if args.detach:
        result = client.request("load", mode="kept", **load)
        print(f"{result['name']} kept (project {result['project']})")
        started = start_line(result)
        if started:  # beside the documented line, not in it: stdout stays exactly what the docs show
            print(started, file=sys.stderr)
        return 0

    def hang_up(*_: Any) -> None:
        raise Hangup()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, hang_up)
    try:
        result = client.request("load", mode="attached", **load)
        name = result["name"]
        print(f"{name} running attached ({counted(result['nodes'], 'node')}, project {result['project']}); "
              "Ctrl-C stops it", flush=True)
        from tatolab import _records  # (datetime) only where log records are shown

        for event in client.events():
            if event.get("event") == "log":
                print(_records.format_for_terminal(event["record"]), flush=True)
            elif event.get("event") == "ended":
                print(f"{name} stopped: {reason_words(event)}", flush=True)
                return 1 if event.get("runtime_down") else 0
        return fail(f"the runtime went down; stream {name} is no longer running")
    except (KeyboardInterrupt, Hangup):
        return 130
    finally:
        client.close()  # hanging up is what unloads an attached stream


def start_line(result: dict[str, Any]) -> str | None:
    """How long the start took: until each node's first process() call (from `run -d`'s answer)."""
    if "ready" not in result:
        return None  # an older runtime
    nodes = result["nodes"]
    took = f" in {result['start_ms'] / 1000:.2f} s" if result.get("start_ms") is not None else ""
    failed: dict[str, str] = result.get("failed") or {}
    if not result["not_ready"] and not failed:
        return f"{nodes} {'node' if nodes == 1 else 'nodes'} running{took}"
    line = f"{result['ready']} of {nodes} {'node' if nodes == 1 else 'nodes'} running{took}"
    for name, reason in sorted(failed.items()):  # the host's line: "node X cannot run: ..."
        line += f"; node {name} failed at its start: {reason.removeprefix(f'node {name} cannot run: ')}"
    if result["not_ready"]:
        line += f"; not called yet (no input, or still starting): {', '.join(result['not_ready'])}"
    return line + f"; `tatolab logs --stream {result['name']}` says more"


def cmd_streams(args: argparse.Namespace) -> int:
    client = Client()
    listing = client.request("streams")
    client.close()
    rows = listing["streams"]
    print(format_streams_table(rows))
    changed = [row for row in rows if row.get("changes")]
    if changed:
        print()
        for row in changed:
            again = "loads as recorded" if row["state"] == "kept" else "is as its stream function builds it"
            print(f"{row['name']} changed live since it loaded ({counted(row['changes'], 'change')}; "
                  f"`tatolab graph --stream {row['name']}` lists them); after a restart it {again}")
    failed = [row for row in rows if row["state"] == "failed"]
    if failed:
        print()
        for row in failed:
            hint = row.get("hint") or _fixes(row.get("fixes")) or f"`tatolab rm {row['name']}` forgets it."
            print(f"{row['name']} failed: {reason_words(row) or 'unknown'}. {hint}")
    troubled = listing["troubled"]
    if troubled:
        from tatolab._cli.inspect import trouble_lines

        print()
        for line in trouble_lines(troubled):
            print(line)
    unwritten = listing["unwritten"]
    if unwritten:
        print()
        for line in write_failure_lines(unwritten):
            print(line)
    recordings = listing.get("recordings")
    if recordings:
        from tatolab._cli.record import size

        print()
        for rec in recordings:
            print(f"{rec['id']} recording {', '.join(rec['addresses'])} to {rec['path']}: {counted(rec['bags'], 'bag')}, "
                  f"{rec['dropped']} dropped, {size(rec['bytes'])}. `tatolab record --stop {rec['id']}` stops it.")
    if listing.get("relay"):
        print()
        print(f"relay: not serving exposed outputs: {listing['relay']}")
    return 0


def _fixes(fixes: list[dict[str, Any]] | None) -> str:
    """A failed stream's fixes as commands: "`tatolab start cam` retries it, `tatolab rm cam` forgets it."."""
    if not fixes:
        return ""
    from tatolab._control.words import command, fixes_in_turn
    from tatolab._control.errors import Fix

    steps = [Fix(f["op"], f["args"], f["does"]) for f in fixes]
    if any(fix.op == "load" for fix in steps):  # a damaged record: forget it, then keep the stream again
        return fixes_in_turn(steps) + "."
    return ", ".join(f"{command(fix)} {fix.does}" for fix in steps) + "."


def write_failure_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        if row.get("failing"):
            lines.append(f"the runtime cannot write {row['path']}: {row['error']} ({row['lost']} write(s) lost so far); "
                         "free space on that disk")
        else:
            lines.append(f"the runtime lost {row['lost']} write(s) to {row['path']} earlier; it writes there again")
    return lines


def format_streams_table(rows: list[dict[str, Any]]) -> str:
    header = ("NAME", "STATE", "NODES", "PROJECT")
    cells = [header] + [
        (r["name"], r["state"], str(r["nodes"]) if r.get("nodes") is not None else "-", r["project"]) for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    lines = []
    for row in cells:
        lines.append("  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3])
    return "\n".join(line.rstrip() for line in lines)


def cmd_stop(args: argparse.Namespace) -> int:
    result = Client().request("stop", name=args.name)
    if result.get("kept"):
        print(f"{args.name} stopped; it stays stopped, across restarts too, until `tatolab start {args.name}`")
    else:
        print(f"{args.name} stopped")
    return 0


def register(commands: Any) -> None:
    run = add(commands, "run")
    add_load_arguments(run)
    run.add_argument("-d", "--detach", action="store_true", help="hand the stream to the runtime to keep")
    run.set_defaults(func=cmd_run)

    streams = add(commands, "streams")
    streams.set_defaults(func=cmd_streams)

    stop = add(commands, "stop")
    stop.add_argument("name")
    stop.set_defaults(func=cmd_stop)
