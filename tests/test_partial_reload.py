"""`tatolab dev` restarts only the nodes a save can have changed, and says which it kept."""

from __future__ import annotations

import copy
import signal

from harness import make_project, read_jsonl, wait_for
from tatolab._runtime.rules.reload import nodes_to_restart, same_shape
from test_warm import RELOAD_FILES, node_pids_by_name

GRAPH = {
    "stream": "s",
    "nodes": [
        {"name": "a", "class": "nodes.a:A", "config": {}, "execution": "continuous", "interval_ms": 5,
         "inputs": [], "outputs": [{"port": "out"}]},
        {"name": "b", "class": "nodes.b:B", "config": {"k": 1}, "execution": "reactive", "interval_ms": None,
         "inputs": [{"port": "inp", "delivery_profile": "newest"}], "outputs": []},
    ],
    "links": [{"from": {"node": "a", "port": "out"}, "to": {"node": "b", "port": "inp"}}],
    "exposures": [],
}
IMPORTS = {"a": {"json", "nodes", "nodes.a", "nodes.shared"}, "b": {"nodes", "nodes.b", "helpers.maths"}}


def test_only_nodes_whose_modules_or_config_changed_restart():
    assert nodes_to_restart(GRAPH, GRAPH, ["nodes/a.py"], IMPORTS) == ["a"]
    assert nodes_to_restart(GRAPH, GRAPH, ["helpers/maths.py"], IMPORTS) == ["b"]
    assert nodes_to_restart(GRAPH, GRAPH, ["stream.py"], IMPORTS) == []
    assert nodes_to_restart(GRAPH, GRAPH, ["nodes/__init__.py"], IMPORTS) == ["a", "b"]  # the package itself
    assert nodes_to_restart(GRAPH, GRAPH, ["helpers/__init__.py"], IMPORTS) == []  # nobody imported `helpers`
    assert nodes_to_restart(GRAPH, GRAPH, ["pyproject.toml"], IMPORTS) == ["a", "b"]
    # a new file that would shadow a module a node imported (json.py beside stream.py) counts as a change
    assert nodes_to_restart(GRAPH, GRAPH, ["json.py"], IMPORTS) == ["a"]
    # a process that has not told what it imported restarts: when in doubt, restart
    assert nodes_to_restart(GRAPH, GRAPH, ["stream.py"], {"a": IMPORTS["a"], "b": None}) == ["b"]
    changed = copy.deepcopy(GRAPH)
    changed["nodes"][1]["config"] = {"k": 2}
    assert nodes_to_restart(GRAPH, changed, [], IMPORTS) == ["b"]


def test_a_node_restarts_when_a_file_its_config_names_is_saved():
    graph = copy.deepcopy(GRAPH)
    graph["nodes"][1]["config"] = {"path": "shaders/tint.glsl"}  # a GlslPixelEffect reads it at start
    assert nodes_to_restart(graph, graph, ["/home/you/p/shaders/tint.glsl"], IMPORTS) == ["b"]
    assert nodes_to_restart(graph, graph, ["/home/you/p/shaders/other.glsl"], IMPORTS) == []
    graph["nodes"][1]["config"] = {"source": "vec4 effect(vec4 c, vec2 uv) {\n return c;\n}"}
    assert nodes_to_restart(graph, graph, ["/home/you/p/shaders/tint.glsl"], IMPORTS) == []


def test_a_new_shape_is_a_whole_new_version():
    assert same_shape(GRAPH, copy.deepcopy(GRAPH))
    for change in (
        lambda g: g["nodes"][1]["inputs"][0].update(delivery_profile="ordered"),
        lambda g: g["nodes"][0].update(interval_ms=10),
        lambda g: g["nodes"][0].update({"class": "nodes.a:Other"}),
        lambda g: g["links"].clear(),
        lambda g: g["exposures"].append({"node": "a", "port": "out", "level": "private"}),
        lambda g: g["nodes"].pop(),
    ):
        other = copy.deepcopy(GRAPH)
        change(other)
        assert not same_shape(GRAPH, other)


LAZY_SINK = """
    import json
    from tatolab.stream import node


    @node
    class Sink:
        @node.input(delivery_profile="newest")
        def rows(self) -> dict: ...

        def __init__(self) -> None:
            self.out = open("seen.jsonl", "a", buffering=1)
            self.last = None

        def process(self, ctx) -> None:
            from nodes import late  # imported only once the first bag came: the runtime must hear of it
            bag = ctx.inputs.read("rows")
            if bag is not None and (bag["version"], bag["mark"], late.LATE) != self.last:
                self.last = (bag["version"], bag["mark"], late.LATE)
                self.out.write(json.dumps({**bag, "late": late.LATE}) + "\\n")
"""


def test_dev_keeps_the_nodes_a_save_cannot_have_changed_and_says_so(runtime, project_venv, tmp_path):
    files = {**RELOAD_FILES, "nodes/sink.py": LAZY_SINK, "nodes/late.py": "LATE = 'a'\n"}
    project = make_project(tmp_path / "reloading", project_venv, files)
    seen = project / "seen.jsonl"
    log = project / ".streamlib" / "logs" / "reloading.jsonl"
    dev = runtime.popen_cli("dev", cwd=project)
    try:
        wait_for(lambda: read_jsonl(seen), timeout=30, what="the first bags")
        before = node_pids_by_name(runtime, "reloading")

        (project / "nodes" / "version.py").write_text("VERSION = 2\n")  # only the relay imports it (through tag)
        wait_for(lambda: [r for r in read_jsonl(seen) if r["version"] == 2], timeout=30, what="version 2")
        after = node_pids_by_name(runtime, "reloading")
        assert after["relay"] != before["relay"]
        assert (after["counter"], after["sink"]) == (before["counter"], before["sink"])
        said = wait_for(lambda: [r for r in read_jsonl(log) if r["message"].startswith("reloaded relay;")],
                        what="the log saying which nodes were kept")
        assert said[0]["message"].startswith("reloaded relay; kept counter, sink ("), said[0]["message"]

        (project / "nodes" / "late.py").write_text("LATE = 'b'\n")  # imported late, inside process()
        wait_for(lambda: [r for r in read_jsonl(seen) if r["late"] == "b"], timeout=30, what="the new late.py")
        again = node_pids_by_name(runtime, "reloading")
        assert again["sink"] != after["sink"] and (again["counter"], again["relay"]) == (after["counter"],
                                                                                          after["relay"])
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)
