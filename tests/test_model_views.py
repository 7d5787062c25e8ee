"""The views made from the graph (tatolab/_model/view.py): what `slowest_paths` answers, its JSON
Schema for the operation and the MCP tool, and what `tatolab top` shows, read from the graph
through the model."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tatolab._cli import top
from tatolab._model.view import GraphView, SlowestPaths, TopView
from tatolab._runtime.views.timing import slowest


def times(p50: float, p99: float, bags: int = 100) -> dict[str, Any]:
    return {"p50_us": p50, "p90_us": p99, "p99_us": p99, "max_us": p99, "bags": bags}


def node(name: str, process: dict[str, Any] | None, *, read: int = 0, written: int = 0) -> dict[str, Any]:
    return {
        "name": name, "kind": f"nodes.{name}:N", "doc": None, "builtin": False, "execution": "reactive", "pid": 7,
        "state": "running", "reason": None, "restarts": 0, "last_error": None, "hung": False, "busy_ms": None,
        "watchdog_ms": None, "memory_limit_mb": None, "hangs": 0, "memory_restarts": 0, "cpu_percent": 3.5,
        "memory_bytes": 2**20, "metrics": {}, "process": process, "process_since_start": process,
        "wait": times(3, 9) if process else None,
        "inputs": [{"port": "in", "delivery_profile": "ordered", "read": read, "dropped": 0, "bad": 0}],
        "outputs": [{"port": "out", "exposure": "internal", "written": written, "last_bag_ns": None,
                     "last_bag_age_ms": None, "taps": []}],
    }


def link(src: str, dst: str, p50: float, p99: float) -> dict[str, Any]:
    s, d = src.split("/"), dst.split("/")
    return {"key": f"{src}->{dst}", "from": {"node": s[0], "port": s[1]}, "to": {"node": d[0], "port": d[1]},
            "delivery_profile": "ordered", "state": "wired", "reason": None, "counters": None,
            "latency": times(p50, p99), "latency_since_start": times(p50, p99)}


def graph(read: int, written: int) -> dict[str, Any]:
    path = {"from": "a/out", "to": "c/in", "through": ["b"], **times(12_000, 45_000), "since_start": times(1, 2)}
    quiet = {"from": None, "from_reason": "an output no loaded stream has", "to": "c/in", "through": [],
             **times(1, 2, bags=0), "since_start": times(1, 2, bags=0)}
    stream = {"name": "cam", "state": "attached", "project": "/p",
              "nodes": [node("a", None, written=written), node("b", times(11_000, 40_000), read=read, written=read),
                        node("c", times(20, 90), read=read)],
              "links": [link("a/out", "b/in", 40, 90), link("b/out", "c/in", 900, 30_000)],
              "paths": [path, quiet]}
    return {"version": 1, "runtime": {"name": "m", "version": "0", "pid": 1, "a_key_of_a_newer_runtime": 1},
            "now_ns": 1, "surfaces": None, "streams": [stream]}


def test_slowest_paths_answers_the_models_shape_and_says_so_in_its_schema():
    from tatolab._mcp.tools import BY_NAME, output_schema
    from tatolab._runtime.ops import OPS, load_all

    answer = {"paths": slowest(graph(10, 10))}
    assert msgspec.convert(answer, SlowestPaths) == answer
    (path,) = answer["paths"]
    assert path["slowest_link"] == {"key": "b/out->c/in", "p50_us": 900, "p99_us": 30_000}
    assert path["slowest_node"] == {"node": "b", "process_p50_us": 11_000, "process_p99_us": 40_000, "wait_p50_us": 3}

    load_all()
    described = OPS["slowest_paths"].schema()
    assert described["result"] == {"$ref": "#/$defs/SlowestPaths"}
    out = output_schema(BY_NAME["slowest_paths"], described)
    assert out is not None and out["type"] == "object" and out["required"] == ["paths"]
    slow = out["$defs"]["SlowPath"]
    assert {"stream", "from", "to", "through", "p99_us", "slowest_link", "slowest_node"} <= set(slow["required"])
    assert {"SlowestLink", "SlowestNode", "Times"} <= set(out["$defs"])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(answer, out)  # what an MCP client checks the tool's structured answer against


def test_top_reads_the_graph_through_the_model_and_shows_typed_rows():
    before, after = top.read_graph(graph(10, 10)), top.read_graph(graph(30, 50))
    snap = top.snapshot((0.0, before), (2.0, after), "proc", 5)
    assert msgspec.convert(snap, TopView) == snap
    rows = {r["node"]: r for r in snap["nodes"]}
    assert [r["node"] for r in snap["nodes"]] == ["b", "c", "a"]  # by process() p99; a has none: last
    assert rows["a"]["out_per_s"] == 20.0 and rows["a"]["input"] is None and rows["a"]["proc_p50_us"] is None
    assert rows["b"]["in_per_s"] == 10.0 and rows["b"]["input"] == "a/out->b/in" and rows["b"]["age_p99_us"] == 90
    assert rows["c"]["input"] == "b/out->c/in" and rows["c"]["wait_p50_us"] == 3
    assert [(p["stream"], p["to"]) for p in snap["paths"]] == [("cam", "c/in")]  # a path without bags: left out
    assert "a_key_of_a_newer_runtime" not in after["runtime"]  # keys it does not know are passed over


def test_top_given_a_graph_that_does_not_fit_says_what_and_the_fix(capsys):
    broken = graph(1, 1)
    del broken["streams"][0]["nodes"][1]["inputs"]
    with pytest.raises(SystemExit):
        top.read_graph(broken)
    said = capsys.readouterr().err
    assert "tatolab top cannot read the runtime's graph (streams[0].nodes[1]: object missing required field " \
           "`inputs`)" in said and "the runtime runs another tatolab than this command" in said


def test_the_graph_builder_here_is_a_whole_view():
    assert msgspec.convert(graph(1, 1), GraphView)["streams"][0]["paths"][1]["from"] is None
