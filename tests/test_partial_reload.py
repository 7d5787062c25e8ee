"""`tatolab dev` restarts only the nodes a save can have changed, and says which it kept."""

from __future__ import annotations

import copy
import signal

from harness import make_project, read_jsonl, wait_for
from tatolab._runtime.rules.reload import Imported, Saved, reload_line, restarts, same_shape
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
P = "/home/you/p"
IMPORTS = {
    "a": Imported(frozenset({"json", "nodes", "nodes.a", "nodes.shared", "tatolab.stream"}),
                  frozenset({f"{P}/nodes/__init__.py", f"{P}/nodes/a.py", f"{P}/nodes/shared.py"})),
    "b": Imported(frozenset({"nodes", "nodes.b", "helpers.maths", "tatolab.stream"}),
                  frozenset({f"{P}/nodes/__init__.py", f"{P}/nodes/b.py", f"{P}/helpers/maths.py"})),
}


def nodes_to_restart(old, new, files, imports):
    return list(restarts(old, new, [Saved(f, f"{P}/{f}") for f in files], imports))


def test_only_nodes_whose_modules_or_config_changed_restart():
    assert nodes_to_restart(GRAPH, GRAPH, ["nodes/a.py"], IMPORTS) == ["a"]
    assert nodes_to_restart(GRAPH, GRAPH, ["helpers/maths.py"], IMPORTS) == ["b"]
    # stream.py is not tatolab/stream.py, which every node imports: saving it restarts none
    assert nodes_to_restart(GRAPH, GRAPH, ["stream.py"], IMPORTS) == []
    assert nodes_to_restart(GRAPH, GRAPH, ["nodes/__init__.py"], IMPORTS) == ["a", "b"]  # the package itself
    assert nodes_to_restart(GRAPH, GRAPH, ["helpers/__init__.py"], IMPORTS) == []  # nobody imported `helpers`
    assert nodes_to_restart(GRAPH, GRAPH, ["pyproject.toml"], IMPORTS) == ["a", "b"]
    # a file of the same last name elsewhere is another module: nodes/maths.py is not helpers/maths.py
    assert nodes_to_restart(GRAPH, GRAPH, ["nodes/maths.py", "other/a.py"], IMPORTS) == []
    # a new file that would shadow a module a node imported (json.py beside stream.py) counts as a change
    assert nodes_to_restart(GRAPH, GRAPH, ["json.py"], IMPORTS) == ["a"]
    # a process that has not told what it imported restarts: when in doubt, restart
    assert nodes_to_restart(GRAPH, GRAPH, ["stream.py"], {"a": IMPORTS["a"], "b": None}) == ["b"]
    changed = copy.deepcopy(GRAPH)
    changed["nodes"][1]["config"] = {"k": 2}
    assert nodes_to_restart(GRAPH, changed, [], IMPORTS) == ["b"]


def test_a_saved_file_matches_by_its_real_path():
    # a node module reached through a symbolic link in the project: the real file is what it imported
    imports = {"a": Imported(frozenset({"nodes.a"}), frozenset({"/elsewhere/a_impl.py"})), "b": IMPORTS["b"]}
    assert list(restarts(GRAPH, GRAPH, [Saved("nodes/a.py", "/elsewhere/a_impl.py")], imports)) == ["a"]


def test_the_log_line_says_what_restarted_and_why():
    changed = copy.deepcopy(GRAPH)
    changed["nodes"][1]["config"] = {"k": 2}
    why = restarts(GRAPH, changed, [Saved("nodes/a.py", f"{P}/nodes/a.py")], IMPORTS)
    assert why == {"a": "it imports nodes/a.py", "b": "its config changed"}
    assert reload_line(why, []) == "reloaded a (it imports nodes/a.py); b (its config changed)"
    assert reload_line({}, ["a", "b"]) == (
        "reloaded no node; kept a, b (nothing they import was saved, and their config is the same)")
    both = restarts(GRAPH, GRAPH, [Saved("pyproject.toml", f"{P}/pyproject.toml")], IMPORTS)
    assert reload_line(both, []) == "reloaded a, b (pyproject.toml was saved)"


def test_a_node_restarts_when_a_file_its_config_names_is_saved():
    graph = copy.deepcopy(GRAPH)
    graph["nodes"][1]["config"] = {"path": "shaders/tint.glsl"}  # a GlslPixelEffect reads it at start
    assert nodes_to_restart(graph, graph, ["shaders/tint.glsl"], IMPORTS) == ["b"]
    assert nodes_to_restart(graph, graph, ["shaders/other.glsl"], IMPORTS) == []
    graph["nodes"][1]["config"] = {"source": "vec4 effect(vec4 c, vec2 uv) {\n return c;\n}"}
    assert nodes_to_restart(graph, graph, ["shaders/tint.glsl"], IMPORTS) == []


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
        said = wait_for(lambda: [r for r in read_jsonl(log) if r["message"].startswith("reloaded relay ")],
                        what="the log saying which nodes were kept")
        assert said[0]["message"] == ("reloaded relay (it imports nodes/version.py); kept counter, sink "
                                      "(nothing they import was saved, and their config is the same)")

        (project / "nodes" / "late.py").write_text("LATE = 'b'\n")  # imported late, inside process()
        wait_for(lambda: [r for r in read_jsonl(seen) if r["late"] == "b"], timeout=30, what="the new late.py")
        again = node_pids_by_name(runtime, "reloading")
        assert again["sink"] != after["sink"] and (again["counter"], again["relay"]) == (after["counter"],
                                                                                          after["relay"])
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)


STEPPING_COUNTER = """
    from tatolab.stream import node


    @node(execution="continuous", interval_ms=20)
    class Counter:
        @node.output()
        def counts(self) -> dict: ...

        def __init__(self, config: dict) -> None:
            self.n = 0
            self.step = config["step"]

        def process(self, ctx) -> None:
            ctx.outputs.write("counts", {"n": self.n})
            self.n += self.step
"""


def test_saving_stream_py_restarts_only_what_its_new_graph_changes(runtime, project_venv, tmp_path):
    stream_py = RELOAD_FILES["stream.py"].replace("add(Counter)", 'add(Counter, config={"step": 1})')
    files = {**RELOAD_FILES, "stream.py": stream_py, "nodes/counter.py": STEPPING_COUNTER}
    project = make_project(tmp_path / "reloading", project_venv, files)
    log = project / ".streamlib" / "logs" / "reloading.jsonl"

    def reloads() -> list[str]:
        return [r["message"] for r in read_jsonl(log) if r["message"].startswith("reloaded ")]

    dev = runtime.popen_cli("dev", cwd=project)
    try:
        wait_for(lambda: read_jsonl(project / "seen.jsonl"), timeout=30, what="the first bags")
        before = node_pids_by_name(runtime, "reloading")

        # a comment: every node imports tatolab/stream.py, but none imports this stream.py, and the graph is the same
        source = project / "stream.py"
        source.write_text("# a comment, and nothing else\n" + source.read_text())
        said = wait_for(lambda: reloads(), timeout=30, what="the reload after a comment")
        assert said == ["reloaded no node; kept counter, relay, sink "
                        "(nothing they import was saved, and their config is the same)"]
        assert node_pids_by_name(runtime, "reloading") == before

        # a real change to one node's config restarts that node alone
        source.write_text(source.read_text().replace('{"step": 1}', '{"step": 2}'))
        said = wait_for(lambda: reloads()[1:], timeout=30, what="the reload after a config change")
        assert said == ["reloaded counter (its config changed); kept relay, sink "
                        "(nothing they import was saved, and their config is the same)"]
        after = wait_for(lambda: (lambda pids: pids if pids.get("counter") not in (None, before["counter"]) else None)(
            node_pids_by_name(runtime, "reloading")), timeout=30, what="the new counter")
        assert (after["relay"], after["sink"]) == (before["relay"], before["sink"])
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)
