"""Node health in the open: crashes, hangs and memory limits show in `graph`, `streams` and the log."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import pytest

from harness import Runtime, graph_node, make_project, one_node_files, read_jsonl, wait_for

from tatolab._links import shm
from tatolab._host.status import NodeStatus, create, open_for_node
from tatolab._links import ring
from tatolab._runtime.rules import health
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.lifecycle.streams import OutputRing
from tatolab._errors import NodeDefinitionError
from tatolab._sdk.nodes import describe_node
from tatolab.stream import node

CRASHER = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=50)
class Crasher:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        raise ValueError("bad frame")
"""

# The first process (no marker file yet) hangs in a regular expression that backtracks for
# hours inside C, holding the GIL; the process started after the watchdog's restart runs normally.
HANGER = """
import os, re
from tatolab.stream import node


@node(execution="continuous", interval_ms=50, watchdog_ms=1000)
class Hanger:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        if not os.path.exists("hung-once"):
            open("hung-once", "w").close()
            re.match(r"(a+)+$", "a" * 40 + "b")
        ctx.outputs.write("out", {"ok": True})
"""

HOG = """
import os
from tatolab.stream import node


@node(execution="continuous", interval_ms=50, memory_limit_mb=100)
class Hog:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.kept = []

    def process(self, ctx) -> None:
        if not os.path.exists("hogged-once"):
            open("hogged-once", "w").close()
            self.kept.append(b"x" * (300 * 1024 * 1024))
        ctx.outputs.write("out", {"ok": True})
"""


def start(runtime: Runtime, project, name: str) -> subprocess.Popen:
    run = runtime.popen_cli("run", cwd=project)
    wait_for(lambda: name in runtime.stream_names(), timeout=30, what=f"stream {name} to load")
    return run


def stop(run: subprocess.Popen) -> None:
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=30)


@pytest.mark.slow
def test_a_crashing_node_shows_its_restarts_and_error_in_graph_and_streams(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "crashy", project_venv, one_node_files("crashy", "Crasher", CRASHER))
    run = start(runtime, project, "crashy")
    try:
        crasher = wait_for(lambda: (n := graph_node(runtime, "crashy", "crasher")).get("restarts", 0) >= 3 and n,
                           timeout=60, what="three restarts")
        listing = runtime.cli("streams", check=True).stdout
    finally:
        stop(run)
    assert crasher["state"] in ("starting", "running", "restarting", "crashed")
    assert crasher["last_error"] == "node crasher raised ValueError: bad frame"
    table, _, trouble = listing.partition("\n\n")
    assert table.splitlines()[0].split() == ["NAME", "STATE", "NODES", "PROJECT"]
    assert "crashy/crasher" in trouble and "restarted" in trouble
    assert "last error: node crasher raised ValueError: bad frame" in trouble
    assert "`tatolab logs --stream crashy --node crasher`" in trouble


@pytest.mark.slow
def test_a_node_stuck_in_process_is_reported_hung_and_restarted(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "stuck", project_venv, one_node_files("stuck", "Hanger", HANGER))
    log = project / ".streamlib" / "logs" / "stuck.jsonl"
    run = start(runtime, project, "stuck")
    try:
        hanger = wait_for(
            lambda: (n := graph_node(runtime, "stuck", "hanger")).get("restarts", 0) >= 1 and n.get("state") == "running" and n,
            timeout=60, what="the hung node to be restarted",
        )
        wait_for(lambda: graph_node(runtime, "stuck", "hanger")["outputs"][0]["written"] > 0, timeout=30,
                 what="the restarted node to write")
    finally:
        stop(run)
    assert hanger["restarts"] == 1 and hanger["hangs"] == 1 and hanger["watchdog_ms"] == 1000
    assert hanger["last_error"].startswith("hung: process() has not returned for ")
    records = read_jsonl(log)
    said = [r for r in records if r["node"] == "hanger" and r["level"] == "error" and "is hung" in r["message"]]
    assert said and said[0]["fields"]["health"] == "hung"
    assert any("was hung and was killed" in r["message"] for r in records)
    # The stacks the node dumped before it was killed name the line it was stuck on.
    assert any(r["node"] == "hanger" and "nodes/stuck.py\", line 13 in process" in r["message"] for r in records)


@pytest.mark.slow
def test_a_node_over_its_memory_limit_is_restarted_and_the_log_says_why(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "hungry", project_venv, one_node_files("hungry", "Hog", HOG))
    log = project / ".streamlib" / "logs" / "hungry.jsonl"
    run = start(runtime, project, "hungry")
    try:
        hog = wait_for(
            lambda: (n := graph_node(runtime, "hungry", "hog")).get("restarts", 0) >= 1 and n.get("state") == "running" and n,
            timeout=60, what="the node to be restarted for its memory",
        )
    finally:
        stop(run)
    assert hog["memory_limit_mb"] == 100 and hog["restarts"] == 1 and hog["memory_restarts"] == 1
    assert hog["last_error"].startswith("over its memory limit: it uses ")
    assert any(
        r["node"] == "hog" and "is over its memory limit" in r["message"] and "memory_limit_mb=100" in r["message"]
        for r in read_jsonl(log)
    )


# --- the decisions, without processes ----------------------------------------------------------

def test_watchdog_defaults_by_execution():
    assert health.watchdog_limit_ms("reactive", None) == health.DEFAULT_WATCHDOG_MS
    assert health.watchdog_limit_ms("continuous", None) == health.DEFAULT_WATCHDOG_MS
    assert health.watchdog_limit_ms("manual", None) is None
    assert health.watchdog_limit_ms("thread", None) is None  # run() is never timed: the node is never busy
    assert health.watchdog_limit_ms("reactive", 250) == 250
    assert health.watchdog_limit_ms("reactive", 0) is None


def test_hung_only_past_the_watchdog_and_never_when_idle():
    second = 1_000_000_000
    assert health.hung(0, 50 * second, 1000) is None  # idle
    assert health.hung(10 * second, 10 * second + second // 2, 1000) is None
    verdict = health.hung(10 * second, 12 * second, 1000)
    assert verdict.trouble is health.Trouble.HUNG
    assert verdict.reason.startswith("hung: process() has not returned for 2.0 s, longer than its watchdog of 1 s")
    assert health.hung(10 * second, 12 * second, None) is None


def test_memory_limit():
    mb = 1024 * 1024
    assert health.memory_limit_bytes(None) is None
    assert health.over_memory(90 * mb, health.memory_limit_bytes(100)) is None
    assert health.over_memory(150 * mb, health.memory_limit_bytes(100)) == health.Verdict(
        health.Trouble.OVER_MEMORY, "over its memory limit: it uses 150 MB, more than memory_limit_mb=100")
    assert health.over_memory(None, 100 * mb) is None


def test_a_node_that_keeps_crashing_is_called_crashed():
    assert health.state_after_exit(1) is health.NodeState.RESTARTING
    assert health.state_after_exit(health.CRASH_LOOP_AFTER) is health.NodeState.CRASHED
    assert health.is_trouble({"state": "running", "restarts": 0}) is False
    assert health.is_trouble({"state": "running", "restarts": 1}) is True
    assert health.is_trouble({"state": "crashed", "restarts": 0}) is True


def test_status_file_says_when_process_began():
    path = f"{shm.private_folder()}/test-{uuid.uuid4().hex}#status"
    try:
        create(path)
        runtime_side = NodeStatus(path)
        node_side = open_for_node(path)
        assert runtime_side.busy_since_ns() == 0
        node_side.begin()
        assert runtime_side.busy_since_ns() > 0
        node_side.end()
        assert runtime_side.busy_since_ns() == 0 and runtime_side.calls() == 1
        node_side.begin()
        runtime_side.reset()  # what the runtime does after a killed node
        assert runtime_side.busy_since_ns() == 0
        node_side.close()
        runtime_side.close()
    finally:
        os.unlink(path)
    open_for_node(None).begin()  # no status file: nothing to do, nothing fails


def test_tap_reader_records_are_reused_after_release():
    base = f"{shm.private_folder()}/test-{uuid.uuid4().hex}+n+p"
    ring.create_ring(base, slot_size=64, slot_count=4)
    try:
        out = OutputRing(base)
        assert [claim_reader(out), claim_reader(out)] == [0, 1]
        reader = ring.RingReader(base, 1, "newest", start="now")
        reader.close()
        release_reader(out, 1)
        assert [r["index"] for r in ring.read_counters(base)["readers"]] == []
        assert claim_reader(out) == 1
    finally:
        ring.reap(base)


def test_node_decorator_takes_watchdog_and_memory_limit():
    @node(execution="continuous", interval_ms=10, watchdog_ms=5000, memory_limit_mb=512)
    class Limited:
        def process(self, ctx) -> None: ...

    @node(execution="continuous", interval_ms=10)
    class Plain:
        def process(self, ctx) -> None: ...

    described = describe_node(Limited)
    assert described["watchdog_ms"] == 5000 and described["memory_limit_mb"] == 512
    assert "watchdog_ms" not in describe_node(Plain) and "memory_limit_mb" not in describe_node(Plain)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"execution": "continuous", "interval_ms": 10, "watchdog_ms": -1}, "watchdog_ms must be"),
        ({"execution": "continuous", "interval_ms": 10, "watchdog_ms": "5s"}, "watchdog_ms must be"),
        ({"execution": "continuous", "interval_ms": 10, "memory_limit_mb": 0}, "memory_limit_mb must be"),
        ({"execution": "manual", "watchdog_ms": 1000}, 'execution="manual" drives itself'),
    ],
)
def test_bad_health_options_are_refused_naming_the_node(options, message):
    with pytest.raises(NodeDefinitionError, match=message) as caught:
        @node(**options)
        class Bad:
            def process(self, ctx) -> None: ...
    assert "Bad" in str(caught.value)
