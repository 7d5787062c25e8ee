"""A node says what it loads in setup (ctx.loading): `graph` shows it `loading`, with what, until
setup returns; then `running`."""

from __future__ import annotations

import pytest

import json

from harness import make_project, one_node_files, wait_for

LOADER = """
    import os
    import time

    from tatolab.stream import node


    @node
    class Loader:
        @node.input(delivery_profile="newest")
        def frames(self) -> dict: ...

        def setup(self, ctx) -> None:
            ctx.loading("the big model (weights.onnx)")
            while not os.path.exists("go"):  # the test says when loading is over
                time.sleep(0.05)

        def process(self, ctx) -> None:
            ctx.inputs.read("frames")
"""


def node_in(runtime, stream: str, name: str, state: str) -> dict | None:
    """The node's `graph` entry once it is in `state` (None before, and while the stream is not loaded yet)."""
    shown = runtime.cli("graph", "--stream", stream)
    if shown.returncode != 0:
        return None
    nodes = [n for s in json.loads(shown.stdout)["streams"] for n in s["nodes"] if n["name"] == name]
    return nodes[0] if nodes and nodes[0]["state"] == state else None


@pytest.mark.slow
def test_graph_shows_a_node_loading_with_what_until_its_setup_returns(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "loading", project_venv, one_node_files("loading", "Loader", LOADER))
    runtime.popen_cli("run", cwd=project)
    node = wait_for(lambda: node_in(runtime, "loading", "loader", "loading"), timeout=60, what="the node loading")
    assert node["reason"] == "loading the big model (weights.onnx)"
    (project / "go").write_text("")
    node = wait_for(lambda: node_in(runtime, "loading", "loader", "running"), timeout=30, what="the node running")
    assert node["reason"] is None


def test_ctx_loading_takes_words():
    from tatolab._sdk.context import Inputs, NodeLogger, Outputs, RuntimeContextLimitedAccess

    said = []
    ctx = RuntimeContextLimitedAccess(stream="s", node="n", inputs=Inputs("n", {}), outputs=Outputs("n", {}),
                                      log=NodeLogger(lambda *a: None), report=said.append)
    ctx.loading("the OCR models")
    assert said == [{"loading": "the OCR models"}]
    with pytest.raises(TypeError, match="node n: ctx.loading takes what is loading"):
        ctx.loading("")
