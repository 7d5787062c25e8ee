"""The node caps: a stream past TATOLAB_MAX_STREAM_NODES, or the machine past TATOLAB_MAX_NODES,
is refused by `run`, `run -d` and `node add`, naming the cap and its setting; the rest runs on."""

from __future__ import annotations

from test_updates import idle_project, running_pids


def test_streams_and_live_adds_past_the_node_caps_are_refused_naming_them(runtime, project_venv, tmp_path):
    runtime.stop()
    runtime.env = dict(runtime.env, TATOLAB_MAX_STREAM_NODES="2", TATOLAB_MAX_NODES="3")
    runtime.start()
    big = idle_project(tmp_path / "big", project_venv, "big", 3)
    small = idle_project(tmp_path / "small", project_venv, "small", 2)
    other = idle_project(tmp_path / "other", project_venv, "other", 2)

    refused = runtime.cli("run", "-d", cwd=big)
    assert refused.returncode != 0
    assert ("stream big cannot start: it would have 3 nodes, and a stream may have at most 2 "
            "(TATOLAB_MAX_STREAM_NODES)") in refused.stderr
    attached = runtime.cli("run", cwd=big)
    assert attached.returncode != 0 and "(TATOLAB_MAX_STREAM_NODES)" in attached.stderr

    runtime.cli("run", "-d", cwd=small, check=True)
    pids = running_pids(runtime, "small", 2)
    added = runtime.cli("node", "add", "small", "idle9", "idle:Idle", cwd=small)
    assert added.returncode != 0
    assert "node idle9 cannot be added to stream small: it would have 3 nodes" in added.stderr

    machine = runtime.cli("run", "-d", cwd=other)
    assert machine.returncode != 0
    assert ("stream other cannot start: this machine would run 4 nodes, and it runs at most 3 "
            "(TATOLAB_MAX_NODES, all streams together; 2 run in other streams now)") in machine.stderr
    assert running_pids(runtime, "small", 2) == pids  # nothing of the refusals touched it
    assert "other" not in runtime.stream_names() and "big" not in runtime.stream_names()


PATTERNS = """
from tatolab.stream import StreamBuilder, TestPatternSource, stream


@stream
def patterns(stream_builder: StreamBuilder) -> None:
    for i in range(17):
        stream_builder.add(TestPatternSource, name=f"p{i}", config={"width": 16, "height": 16, "fps": 5})
"""


def test_a_node_the_surface_pool_has_no_place_for_is_told_so_in_graph_and_its_log(runtime, project_venv, tmp_path):
    import json

    from harness import make_project, wait_for

    runtime.stop()
    runtime.env = dict(runtime.env, TATOLAB_SURFACE_HOLDERS="16")
    runtime.start()
    project = make_project(tmp_path / "patterns", project_venv, {"stream.py": PATTERNS})
    runtime.cli("run", "-d", cwd=project, check=True)

    def refused() -> list[dict]:
        graph = json.loads(runtime.cli("graph", "--stream", "patterns", check=True).stdout)
        return [n for s in graph["streams"] for n in s["nodes"] if n.get("surfaces")]

    (node,) = wait_for(refused, timeout=60, what="the node past the pool's 16 places named in graph")
    assert node["surfaces"] == ("it cannot use frames: all 16 places in the surface pool are taken; set "
                                "TATOLAB_SURFACE_HOLDERS higher for tatolabd and restart it, or run fewer nodes "
                                "that handle frames")
    graph = json.loads(runtime.cli("graph", "--stream", "patterns", check=True).stdout)
    assert graph["surfaces"]["holders"] == 16 and graph["surfaces"]["holders_refused"] >= 1
    log = runtime.cli("logs", "--stream", "patterns", "--node", node["name"], check=True).stdout
    assert "frame dropped: this process cannot use frames: all 16 places in the surface pool are held" in log
    assert "set TATOLAB_SURFACE_HOLDERS higher" in log
