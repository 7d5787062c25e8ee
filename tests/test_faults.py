"""Faults that must not stop recovery (issue 9, findings 5-8 and 16): a node with a helper
process, a full disk, running out of descriptors, a slow attached terminal, a runtime dying
mid-request."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil
import pytest

from harness import Runtime, make_project, read_jsonl, wait_for

HELPER_NODE = """
import os, subprocess
from tatolab.stream import node


@node(execution="continuous", interval_ms=50)
class Spawner:
    @node.output()
    def out(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.helper = subprocess.Popen(["sleep", "600"])
        with open("helpers.txt", "a") as f:
            f.write(f"{os.getpid()} {self.helper.pid}\\n")

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"pid": os.getpid()})
"""


def one_node_files(name: str, cls: str, code: str) -> dict[str, str]:
    stream = (
        "from tatolab.stream import StreamBuilder, stream\n"
        f"from nodes.{name} import {cls}\n\n\n"
        f"@stream\ndef {name}(stream_builder: StreamBuilder) -> None:\n    stream_builder.add({cls})\n"
    )
    return {"stream.py": stream, "nodes/__init__.py": "", f"nodes/{name}.py": code}


def graph_node(runtime: Runtime, stream: str, name: str) -> dict:
    g = json.loads(runtime.cli("graph", "--stream", stream, check=True).stdout)
    return next(n for n in g["streams"][0]["nodes"] if n["name"] == name)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def helpers(project) -> list[tuple[int, int]]:
    path = project / "helpers.txt"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines() if line.strip()]


def test_a_killed_node_with_a_helper_is_restarted_and_its_helper_ends(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "helped", project_venv, one_node_files("helped", "Spawner", HELPER_NODE))
    runtime.cli("run", "-d", cwd=project, check=True)
    node, helper = wait_for(lambda: helpers(project), timeout=30, what="the node to start its helper")[0]
    os.kill(node, signal.SIGKILL)
    entry = wait_for(
        lambda: (n := graph_node(runtime, "helped", "spawner"))["restarts"] >= 1 and n["pid"] not in (None, node) and n,
        timeout=30, what="the killed node to be restarted",
    )
    assert entry["state"] in ("starting", "running")
    wait_for(lambda: not alive(helper), timeout=10, what="the dead node's helper to end")
    assert "was killed by SIGKILL" in json.dumps(entry) or "SIGKILL" in (entry["last_error"] or "")
    runtime.cli("stop", "helped", check=True)
    second_helper = helpers(project)[-1][1]
    wait_for(lambda: not alive(second_helper), timeout=10, what="the stopped node's helper to end")


def test_a_node_helper_does_not_outlive_a_killed_runtime(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "helped", project_venv, one_node_files("helped", "Spawner", HELPER_NODE))
    try:
        runtime.cli("run", "-d", cwd=project, check=True)
        _, helper = wait_for(lambda: helpers(project), timeout=30, what="the node to start its helper")[0]
        runtime.stop(signal.SIGKILL)
        wait_for(lambda: not alive(helper), timeout=10, what="the helper to end with the runtime")
    finally:
        runtime.start()  # the next runtime reaps what the killed one left, then stops cleanly
        runtime.stop()
    assert runtime.leftover_processes() == []
    assert all(not alive(h) for _, h in helpers(project))
