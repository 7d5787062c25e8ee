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

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tatolab._model.view import SortKey
from tatolab._model.view import GraphView, LinkView, NodeView, StreamView, Times, TopPath, TopRow, TopView

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


def _node_totals(node: NodeView) -> tuple[int, int, int]:
    """(bags read, bags written, bags dropped) so far by ``node``."""
    written = sum(p["written"] or 0 for p in node["outputs"])
    return sum(p["read"] for p in node["inputs"]), written, sum(p["dropped"] for p in node["inputs"])


def _totals(graph: GraphView) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(stream, node) -> (bags read, bags written, bags dropped) so far."""
    return {(stream["name"], node["name"]): _node_totals(node) for stream in graph["streams"] for node in stream["nodes"]}


def _rate(now: int, before: int | None, dt: float) -> float | None:
    if before is None or dt <= 0:
        return None
    return round(max(0, now - before) / dt, 1)  # a counter that went back: the node restarted


def _timed(times: Times | None) -> Times | None:
    """A node's own times (graph's ``process`` or ``wait``) when it has calls counted, else None."""
    return times if times and times["bags"] else None


def _worst_inputs(stream: StreamView) -> dict[str, LinkView]:
    """node -> the link into it whose bags are oldest when read (p99 over the last 10 s)."""
    worst: dict[str, tuple[float, LinkView]] = {}
    for link in stream["links"]:
        latency, node = link["latency"], link["to"].get("node")
        if not latency or not latency["bags"] or node is None:
            continue
        age = latency["p99_us"] or 0
        if node not in worst or age > worst[node][0]:
            worst[node] = (age, link)
    return {node: link for node, (_, link) in worst.items()}


def rows(before: GraphView, after: GraphView, dt: float) -> list[TopRow]:
    """One row per node of ``after``, its rates measured against ``before`` (``dt`` seconds earlier)."""
    then = _totals(before)
    out: list[TopRow] = []
    for stream in after["streams"]:
        worst = _worst_inputs(stream)
        for node in stream["nodes"]:
            read, written, dropped = _node_totals(node)
            old = then.get((stream["name"], node["name"]))
            link = worst.get(node["name"])
            age = link["latency"] if link else None
            process, wait = _timed(node["process"]), _timed(node["wait"])
            out.append(TopRow(
                stream=stream["name"], node=node["name"], state=node["state"],
                cpu_percent=node["cpu_percent"], memory_bytes=node["memory_bytes"],
                in_per_s=_rate(read, old and old[0], dt), out_per_s=_rate(written, old and old[1], dt),
                dropped_per_s=_rate(dropped, old and old[2], dt),
                input=link["key"] if link else None,
                age_p50_us=age["p50_us"] if age else None, age_p99_us=age["p99_us"] if age else None,
                proc_p50_us=process["p50_us"] if process else None, proc_p99_us=process["p99_us"] if process else None,
                wait_p50_us=wait["p50_us"] if wait else None,
            ))
    return out


def paths(graph: GraphView, limit: int) -> list[TopPath]:
    every = [TopPath(stream=s["name"], **p) for s in graph["streams"] for p in s["paths"] if p["bags"]]
    every.sort(key=lambda p: -(p["p99_us"] or 0))
    return every[:limit]


def _sorted(table: list[TopRow], key: str) -> list[TopRow]:
    field, biggest_first = SORT_KEYS[key]

    def value(row: TopRow) -> Any:
        return cast("Mapping[str, Any]", row)[field]  # the column the key names

    known = [r for r in table if value(r) is not None]
    unknown = [r for r in table if value(r) is None]
    known.sort(key=value, reverse=biggest_first)
    return known + sorted(unknown, key=lambda r: (r["stream"], r["node"]))


def read_graph(answer: object) -> GraphView:
    """The ``graph`` operation's answer, read through its model (keys it does not know are passed over)."""
    import msgspec

    from tatolab._model.fit import fit_problem

    try:
        return msgspec.convert(answer, GraphView)
    except msgspec.ValidationError as exc:
        raise SystemExit(fail(f"tatolab top cannot read the runtime's graph ({fit_problem(exc)}): the runtime runs "
                              "another tatolab than this command; use the tatolab command of the runtime's "
                              "install, or restart the runtime from this one")) from None


def sample(client: Client, stream: str | None) -> tuple[float, GraphView]:
    return time.monotonic(), read_graph(client.request("graph", **({"stream": stream} if stream else {})))


def snapshot(before: tuple[float, GraphView], after: tuple[float, GraphView], sort: str, limit: int) -> TopView:
    """What one screen shows, as `--json` prints it."""
    dt = after[0] - before[0]
    return TopView(interval_s=round(dt, 3), sort=cast("SortKey", sort),
                   nodes=_sorted(rows(before[1], after[1], dt), sort), paths=paths(after[1], limit))


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(snap: TopView) -> Any:
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
