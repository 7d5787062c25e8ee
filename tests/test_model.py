"""The typed model (tatolab/_model/): a compiled graph decodes through it, each bad graph with an
error naming what is wrong, and the `graph` operation's schema (and the MCP tool's) comes from it."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from tatolab._model.graph import GraphProblem, check_graph, check_node, graph_problem
from tatolab._model.view import GraphView


def good_graph() -> dict[str, Any]:
    """A graph as `python -m tatolab._compile` prints it (every key a current compile gives)."""
    return {
        "version": 1, "stream": "cam", "function": "cam", "module": "stream.py", "doc": None,
        "nodes": [
            {"name": "src", "class": "nodes.s:Source", "doc": "Counts.", "config": {"every": 2},
             "execution": "continuous", "interval_ms": 10, "inputs": [], "outputs": [{"port": "out"}],
             "watchdog_ms": 5000},
            {"name": "n", "class": "nodes.n:N", "doc": None, "config": None, "execution": "reactive",
             "interval_ms": None, "inputs": [{"port": "in", "delivery_profile": "ordered", "spin_us": 50.0},
                                             {"port": "mic", "delivery_profile": "newest",
                                              "audio": {"sample_rate": 16000, "channels": 1}}],
             "outputs": [{"port": "rows"}], "builtin": False, "memory_limit_mb": 512},
        ],
        "links": [{"from": {"node": "src", "port": "out"}, "to": {"node": "n", "port": "in"}},
                  {"from": {"address": "other/src/out", "url": "https://m:4443/x?jwt=t"},
                   "to": {"node": "n", "port": "mic"}}],
        "exposures": [{"node": "n", "port": "rows", "level": "public"}],
    }


def test_a_good_compiled_graph_round_trips_unchanged():
    graph = good_graph()
    checked = check_graph(graph)
    assert checked is graph and checked == good_graph()  # the same dict: nothing added or dropped
    assert json.loads(json.dumps(checked)) == good_graph()


def test_an_old_record_without_the_newer_optional_keys_still_loads():
    old = {"nodes": [{"name": "n", "class": "nodes.n:N", "inputs": [], "outputs": [{"port": "out"}]}],
           "links": []}  # no version, stream, exposures, execution, builtin, watchdog_ms, ...
    assert graph_problem(old) is None


BREAKAGES: dict[str, Callable[[dict[str, Any]], object]] = {
    "gives node src no class (module:Class)": lambda g: g["nodes"][0].pop("class"),
    "gives node src a class (module:Class) that is a whole number, not text": lambda g: g["nodes"][0].update(
        {"class": 3}),
    "gives node src the class 'Source', which is not module:Class": lambda g: g["nodes"][0].update(
        {"class": "Source"}),
    "gives input n/in the delivery profile 'fast', which is not newest or ordered": lambda g: g["nodes"][1][
        "inputs"][0].update(delivery_profile="fast"),
    "gives input n/mic the format 's24', which is not s16 or f32": lambda g: g["nodes"][1]["inputs"][1][
        "audio"].update(format="s24"),
    "gives input n/mic a number of channels that is text, not a whole number": lambda g: g["nodes"][1][
        "inputs"][1]["audio"].update(channels="two"),
    "gives input n/in no delivery profile (newest or ordered)": lambda g: g["nodes"][1]["inputs"][0].pop(
        "delivery_profile"),
    "has two nodes named n": lambda g: g["nodes"][0].update(name="n"),
    "has a node named 'My Node', which is not a node name": lambda g: g["nodes"][0].update(name="My Node"),
    "links to n/nope, which is not an input of its nodes": lambda g: g["links"][0]["to"].update(port="nope"),
    "links to missing/in, which is not an input of its nodes": lambda g: g["links"][0]["to"].update(node="missing"),
    "links from src/nope, which is not an output of its nodes": lambda g: g["links"][0]["from"].update(port="nope"),
    "has a link (number 1, to n/in) from no node and port, nor an address": lambda g: g["links"][0].update(
        {"from": {}}),
    "gives node src a port named '../../x', which is not a port name": lambda g: g["nodes"][0]["outputs"].append(
        {"port": "../../x"}),
    "gives node n a port named 'a/b', which is not a port name": lambda g: g["nodes"][1]["inputs"].append(
        {"port": "a/b", "delivery_profile": "newest"}),
    "gives node n two inputs named in": lambda g: g["nodes"][1]["inputs"].append(
        {"port": "in", "delivery_profile": "newest"}),
    "gives node src a config that is a whole number, not an object or null": lambda g: g["nodes"][0].update(
        config=3),
    "gives node n no list of outputs": lambda g: g["nodes"][1].pop("outputs"),
    "gives node n a list of inputs that is an object, not a list": lambda g: g["nodes"][1].update(inputs={}),
    "has a link (number 3) that is text, not an object": lambda g: g["links"].append("src->n"),
    "gives the source of a link (number 1) an address that is a whole number, not text": lambda g: g["links"][0][
        "from"].update(address=7),
    "gives node number 2 no name": lambda g: g["nodes"][1].pop("name"),
    "gives an exposure (number 1) the level 'everyone', which is not private or public": lambda g: g[
        "exposures"][0].update(level="everyone"),
    "exposes n/nope, which is not an output of its nodes": lambda g: g["exposures"][0].update(port="nope"),
    "has no link list": lambda g: g.pop("links"),
    "gives the graph a node list that is text, not a list": lambda g: g.update(nodes="x"),
}


@pytest.mark.parametrize("reason", list(BREAKAGES))
def test_each_kind_of_bad_graph_gives_its_error(reason: str):
    graph = good_graph()
    BREAKAGES[reason](graph)
    with pytest.raises(GraphProblem) as raised:
        check_graph(graph)
    assert str(raised.value).startswith(reason)
    assert graph_problem(copy.deepcopy(graph)) == str(raised.value)


def test_a_graph_that_is_not_an_object_says_so():
    assert graph_problem(["nodes"]) == "is a list, not an object"


def test_the_graph_operation_answers_the_view_models_schema():
    from tatolab._runtime.ops import OPS, load_all

    load_all()
    described = OPS["graph"].schema()
    assert described["result"] == {"$ref": "#/$defs/GraphView"}
    view = described["$defs"]["GraphView"]
    assert set(view["properties"]) == set(GraphView.__annotations__)
    assert {"version", "runtime", "now_ns", "surfaces", "streams"} <= set(view["required"])
    node = described["$defs"]["NodeView"]["properties"]
    assert {"inputs", "outputs", "state", "pid", "restarts", "process"} <= set(node)
    link = described["$defs"]["LinkView"]["properties"]
    assert {"from", "to", "counters", "latency", "state"} <= set(link)
    assert set(described["$defs"]["LinkCounters"]["required"]) >= {"written", "read", "dropped", "bad", "behind"}
    assert described["$defs"]["InputViewMore"]["properties"]["delivery_profile"] == {"enum": ["newest", "ordered"]}


def test_the_mcp_graph_tool_gives_the_views_keys_as_its_output_schema():
    from tatolab._mcp.tools import BY_NAME, input_schema, output_schema
    from tatolab._runtime.ops import OPS, load_all

    load_all()
    described = OPS["graph"].schema()
    out = output_schema(BY_NAME["graph"], described)
    assert out is not None and out["type"] == "object"
    assert {"version", "runtime", "now_ns", "surfaces", "streams", "recordings"} <= set(out["properties"])
    stream = out["$defs"]["StreamView"]["properties"]
    assert {"name", "state", "nodes", "links", "paths"} <= set(stream)
    assert "$defs" not in input_schema(BY_NAME["graph"], described)  # its arguments refer to none of them
    assert output_schema(BY_NAME["streams" if "streams" in BY_NAME else "list_streams"],
                         OPS["streams"].schema()) is None  # a tool that does not say


def test_the_view_model_accepts_a_graph_as_views_graph_builds_it():
    """The view's shape is what build_graph makes: a stream listed but not loaded, on a bare runtime."""
    import msgspec

    from tatolab._runtime.views.graph import build_graph

    built = build_graph({}, [{"name": "cam", "state": "stopped", "project": "/p", "reason": None}],
                        read_counters=lambda base: {})
    assert msgspec.convert(built, GraphView) == built


def test_a_node_described_for_a_running_stream_decodes_through_the_model():
    """describe_node's entry (add_node) is checked as a graph of that one node would be."""
    node = good_graph()["nodes"][1]
    assert check_node(node) is node
    del node["outputs"]
    with pytest.raises(GraphProblem, match="^gives node n no list of outputs$"):
        check_node(node)
