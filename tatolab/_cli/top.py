"""`tatolab top`: like htop, for streams: a row per node (CPU, memory, bags in and out per second,
drops, its process() time and how long its bags wait inside it, how old its worst input's bags
are when read) and the slowest paths below, every second.

The numbers are `tatolab graph`'s (docs/graph.md): rates are the change of its counters between
two samples; ages are the links' `latency` (the last 10 s); paths are the streams' `paths`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._control.client import Client

INTERVAL_S = 1.0
SORT_KEYS = {  # the key's name -> (the row's field, biggest first)
    "age": ("age_p99_us", True),
    "proc": ("proc_p99_us", True),
    "cpu": ("cpu_percent", True),
    "memory": ("memory_bytes", True),
    "in": ("in_per_s", True),
    "out": ("out_per_s", True),
    "dropped": ("dropped_per_s", True),
    "name": ("node", False),
}


def _totals(graph: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(stream, node) -> (bags read, bags written, bags dropped) so far."""
    out: dict[tuple[str, str], tuple[int, int, int]] = {}
    for stream in graph.get("streams", []):
        for node in stream.get("nodes", []):
            written = sum(p.get("written") or 0 for p in node.get("outputs", []))
            read = sum(p.get("read", 0) for p in node.get("inputs", []))
            dropped = sum(p.get("dropped", 0) for p in node.get("inputs", []))
            out[(stream["name"], node["name"])] = (read, written, dropped)
    return out


def _rate(now: int, before: int | None, dt: float) -> float | None:
    if before is None or dt <= 0:
        return None
    return round(max(0, now - before) / dt, 1)  # a counter that went back: the node restarted


def _p(times: dict[str, Any] | None, key: str) -> float | None:
    """A percentile of a node's own times (graph's ``process`` or ``wait``); None without calls."""
    return times[key] if times and times.get("bags") else None


def rows(before: dict[str, Any], after: dict[str, Any], dt: float) -> list[dict[str, Any]]:
    """One row per node of ``after``, its rates measured against ``before`` (``dt`` seconds earlier)."""
    then = _totals(before)
    out = []
    for stream in after.get("streams", []):
        worst: dict[str, dict[str, Any]] = {}
        for link in stream.get("links", []):
            lat = link.get("latency")
            if not lat or not lat.get("bags"):
                continue
            node = link["to"]["node"]
            if node not in worst or (lat["p99_us"] or 0) > (worst[node]["latency"]["p99_us"] or 0):
                worst[node] = link
        for node in stream.get("nodes", []):
            key = (stream["name"], node["name"])
            read, written, dropped = _totals({"streams": [{"name": stream["name"], "nodes": [node]}]})[key]
            old = then.get(key)
            link = worst.get(node["name"])
            out.append({
                "stream": stream["name"], "node": node["name"], "state": node.get("state"),
                "cpu_percent": node.get("cpu_percent"), "memory_bytes": node.get("memory_bytes"),
                "in_per_s": _rate(read, old and old[0], dt), "out_per_s": _rate(written, old and old[1], dt),
                "dropped_per_s": _rate(dropped, old and old[2], dt),
                "input": link["key"] if link else None,
                "age_p50_us": link["latency"]["p50_us"] if link else None,
                "age_p99_us": link["latency"]["p99_us"] if link else None,
                "proc_p50_us": _p(node.get("process"), "p50_us"), "proc_p99_us": _p(node.get("process"), "p99_us"),
                "wait_p50_us": _p(node.get("wait"), "p50_us"),
            })
    return out


def paths(graph: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    every = [{"stream": s["name"], **p} for s in graph.get("streams", []) for p in s.get("paths", []) if p.get("bags")]
    every.sort(key=lambda p: -(p["p99_us"] or 0))
    return every[:limit]


def _sorted(table: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    field, biggest_first = SORT_KEYS[key]
    known = [r for r in table if r[field] is not None]
    unknown = [r for r in table if r[field] is None]
    known.sort(key=lambda r: r[field], reverse=biggest_first)
    return known + sorted(unknown, key=lambda r: (r["stream"], r["node"]))


def sample(client: Client, stream: str | None) -> tuple[float, dict[str, Any]]:
    return time.monotonic(), client.request("graph", **({"stream": stream} if stream else {}))


def snapshot(before: tuple[float, dict[str, Any]], after: tuple[float, dict[str, Any]], sort: str,
             limit: int) -> dict[str, Any]:
    """What one screen shows, as `--json` prints it."""
    dt = after[0] - before[0]
    return {"interval_s": round(dt, 3), "sort": sort, "nodes": _sorted(rows(before[1], after[1], dt), sort),
            "paths": paths(after[1], limit)}


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(snap: dict[str, Any]) -> Any:
    """The screen, as rich renderables."""
    from rich.console import Group
    from rich.table import Table

    nodes = Table(title=f"nodes (sorted by {snap['sort']}; rates over {snap['interval_s']:g} s, ages over the last 10 s)",
                  title_justify="left", box=None, header_style="bold")
    for name, justify in (("STREAM", "left"), ("NODE", "left"), ("STATE", "left"), ("CPU%", "right"),
                          ("MEM MB", "right"), ("IN/s", "right"), ("OUT/s", "right"), ("DROP/s", "right"),
                          ("PROC p50 ms", "right"), ("PROC p99 ms", "right"), ("WAIT p50 ms", "right"),
                          ("AGE p50 ms", "right"), ("AGE p99 ms", "right"), ("WORST INPUT", "left")):
        nodes.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in snap["nodes"]:
        mem = None if r["memory_bytes"] is None else r["memory_bytes"] / 2**20
        nodes.add_row(r["stream"], r["node"], str(r["state"]), _num(r["cpu_percent"], "{:.1f}"), _num(mem, "{:.1f}"),
                      _num(r["in_per_s"]), _num(r["out_per_s"]), _num(r["dropped_per_s"]),
                      _ms(r["proc_p50_us"]), _ms(r["proc_p99_us"]), _ms(r["wait_p50_us"]),
                      _ms(r["age_p50_us"]), _ms(r["age_p99_us"]), r["input"] or "-")
    slow = Table(title="slowest paths (source to sink, the last 10 s)", title_justify="left", box=None,
                 header_style="bold")
    for name, justify in (("STREAM", "left"), ("FROM", "left"), ("TO", "left"), ("THROUGH", "left"),
                          ("p50 ms", "right"), ("p99 ms", "right"), ("MAX ms", "right"), ("BAGS", "right")):
        slow.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for p in snap["paths"]:
        slow.add_row(p["stream"], p["from"] or "?", p["to"], " > ".join(p["through"]) or "-", _ms(p["p50_us"]),
                     _ms(p["p99_us"]), _ms(p["max_us"]), f"{p['bags']:,}")
    if not snap["paths"]:
        slow.add_row("-", "no bag has reached a sink in the last 10 s", "", "", "", "", "", "")
    return Group(nodes, "", slow)


def cmd_top(args: argparse.Namespace) -> int:
    if args.paths < 1:
        return fail(f"--paths must be at least 1, got {args.paths}")
    client = Client()
    before = sample(client, args.stream)
    if args.json or args.once:
        time.sleep(INTERVAL_S)  # rates need two samples
        snap = snapshot(before, sample(client, args.stream), args.sort, args.paths)
        if args.json:
            print(json.dumps(snap, indent=2))
            return 0
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        return fail("tatolab top draws with the rich package, which is missing; install the runtime's extras "
                    "(pip install 'tatolab[runtime]'), or use `tatolab top --json`")
    console = Console(width=None if sys.stdout.isatty() else 200)
    if args.once:
        console.print(render(snap))
        return 0
    time.sleep(INTERVAL_S)
    after = sample(client, args.stream)
    try:
        with Live(render(snapshot(before, after, args.sort, args.paths)), console=console,
                  refresh_per_second=2, screen=False) as live:
            while True:
                time.sleep(INTERVAL_S)
                before, after = after, sample(client, args.stream)
                live.update(render(snapshot(before, after, args.sort, args.paths)))
    except KeyboardInterrupt:
        return 0


def register(commands: Any) -> None:
    top = add(commands, "top")
    top.add_argument("--stream", help="only this stream")
    top.add_argument("--sort", choices=tuple(SORT_KEYS), default="age",
                     help="order of the nodes (default age: the worst input's p99 read age, oldest first)")
    top.add_argument("--paths", type=int, default=5, help="how many of the slowest paths to show (default 5)")
    top.add_argument("--once", action="store_true", help="print one table (after a one-second sample) and exit")
    top.add_argument("--json", action="store_true", help="print the same numbers as one JSON object and exit")
    top.set_defaults(func=cmd_top)
