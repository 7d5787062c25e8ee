"""Changing a running stream's graph live, from the command line (`tatolab node`, `tatolab link`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, PASS_THROUGH, SINK

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink


@stream
def counting(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter, name="counter", config={"interval_ms": 10})
    sink = stream_builder.add(OrderedSink, name="sink", config={"path": "rows.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
"""

BROKEN = """
from tatolab.stream import node


@node
class NoCamera:
    @node.input(delivery_profile="newest")
    def rows(self) -> dict: ...

    def setup(self, ctx) -> None:
        raise RuntimeError("no camera at /dev/video9")

    def process(self, ctx) -> None:
        pass
"""

UNSURE = """
from tatolab.stream import node


@node
class Unsure:
    @node.input()
    def rows(self) -> dict: ...

    def process(self, ctx) -> None:
        pass
"""


def counting_project(tmp_path: Path, venv: Path) -> Path:
    """A kept-able stream (counter -> sink) whose project also holds a node it does not use yet."""
    return make_project(tmp_path / "counting", venv, {
        "stream.py": STREAM, "nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/sinks.py": SINK,
        "nodes/doubler.py": PASS_THROUGH, "nodes/unsure.py": UNSURE,
        "nodes/broken.py": BROKEN,
    })


def graph_of(rt: Runtime, stream: str) -> dict:
    (entry,) = json.loads(rt.cli("graph", "--stream", stream, check=True).stdout)["streams"]
    return entry


def pids(rt: Runtime, stream: str) -> dict[str, int | None]:
    """Each node's pid; {} while the stream is not loaded (compiling, or between two versions)."""
    answer = rt.cli("graph", "--stream", stream)
    if answer.returncode != 0:
        return {}
    (entry,) = json.loads(answer.stdout)["streams"]
    return {node["name"]: node["pid"] for node in entry["nodes"]}


def running_pids(rt: Runtime, stream: str, names: set[str]) -> dict[str, int]:
    def all_running() -> dict[str, int] | None:
        now = pids(rt, stream)
        return now if set(now) == names and all(now.values()) else None

    return wait_for(all_running, timeout=60, what=f"nodes {sorted(names)} of {stream} to run")  # type: ignore[return-value]


def tapped(rt: Runtime, address: str, count: int) -> list[dict]:
    result = rt.cli("tap", address, "--count", str(count), "--timeout", "30")
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["bag"] for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_a_node_added_and_linked_live_flows_and_goes_and_the_others_keep_their_processes(runtime, project_venv,
                                                                                        tmp_path):
    folder = counting_project(tmp_path, project_venv)
    runtime.cli("run", "-d", cwd=folder, check=True)
    before = running_pids(runtime, "counting", {"counter", "sink"})

    added = runtime.cli("node", "add", "counting", "doubler", "nodes.doubler:Doubler", check=True).stdout
    # it answers once the node runs: its pid, set up and waiting for bags (it is not linked yet)
    said = re.fullmatch(r"doubler added to stream counting \(nodes.doubler:Doubler\), running in its own process "
                        r"\(pid (\d+)\), set up in [\d.]+ ms, waiting for bags on its inputs; inputs: numbers "
                        r"\(ordered\); outputs: counting/doubler/doubled", added.splitlines()[0])
    assert said, added
    assert pids(runtime, "counting")["doubler"] == int(said.group(1))
    assert "a live change: counting is kept, and loads as recorded after a restart" in added
    linked = runtime.cli("link", "add", "counting/counter/counts", "counting/doubler/numbers", check=True).stdout
    assert linked.startswith("link counter/counts->doubler/numbers added in stream counting\n"), linked
    now = running_pids(runtime, "counting", {"counter", "sink", "doubler"})
    assert {k: now[k] for k in before} == before  # nothing else restarted

    bags = tapped(runtime, "counting/doubler/doubled", 3)
    assert [bag["doubled"] for bag in bags] == [bag["n"] * 2 for bag in bags] and len(bags) == 3

    # Refusals name what is wrong and the way out; the next call works.
    bad_port = runtime.cli("link", "add", "counting/counter/nope", "counting/doubler/numbers")
    assert bad_port.returncode == 1
    assert bad_port.stderr.strip() == ("error: node counter (nodes.counter:Counter) of stream counting has no output "
                                       "named nope; its inputs: none; its outputs: counts")
    twice = runtime.cli("link", "add", "counting/counter/counts", "counting/doubler/numbers")
    assert twice.returncode == 1
    assert "counter/counts is already connected to doubler/numbers" in twice.stderr
    assert "`tatolab link rm counter/counts counting/doubler/numbers`" in twice.stderr
    bad_class = runtime.cli("node", "add", "counting", "probe", "nodes.nosuch:Probe")
    assert bad_class.returncode == 1
    assert bad_class.stderr.startswith("error: cannot add node probe to stream counting: nodes.nosuch:Probe cannot be "
                                       "imported: ModuleNotFoundError: No module named 'nodes.nosuch'"), bad_class.stderr
    no_profile = runtime.cli("node", "add", "counting", "unsure", "nodes.unsure:Unsure")
    assert no_profile.returncode == 1
    assert no_profile.stderr.startswith("error: cannot add node unsure to stream counting: nodes.unsure:Unsure: Node "
                                        "Unsure: input 'rows' has no delivery profile."), no_profile.stderr
    bad_config = runtime.cli("node", "add", "counting", "src", "TestPatternSource", "--config", '{"fps": "fast"}')
    assert bad_config.returncode == 1
    assert bad_config.stderr.startswith("error: cannot add node src to stream counting: Node 'src' (TestPatternSource): "
                                        "the config does not fit TestPatternConfig: field `fps`: expected `float`, "
                                        "got `str`"), bad_config.stderr

    # another stream's output, by address (remote_output): it waits, saying why, until it can be read
    remote = runtime.cli("link", "add", "clock/ticker/ticks", "counting/doubler/numbers", check=True).stdout
    assert remote.startswith("link clock/ticker/ticks->doubler/numbers added in stream counting; waiting: no stream "
                             "named clock is loaded on this machine"), remote
    waiting = [link for link in graph_of(runtime, "counting")["links"] if link["key"].startswith("clock/")]
    assert [(link["state"], link["from"]) for link in waiting] == [("waiting", {"address": "clock/ticker/ticks"})]
    runtime.cli("link", "rm", "clock/ticker/ticks", "counting/doubler/numbers", check=True)

    entry = graph_of(runtime, "counting")
    assert entry["changed_since_recorded"] is True
    assert entry["changes"][2:] == [
        {"change": "connect", "output": "clock/ticker/ticks", "input": "doubler/numbers"},
        {"change": "disconnect", "output": "clock/ticker/ticks", "input": "doubler/numbers"},
    ]
    assert entry["changes"][:2] == [
        {"change": "add_node", "node": "doubler", "class": "nodes.doubler:Doubler"},
        {"change": "connect", "output": "counter/counts", "input": "doubler/numbers"},
    ]
    listing = runtime.cli("streams", check=True).stdout
    assert ("counting changed live since it loaded (4 changes; `tatolab graph --stream counting` lists them); "
            "after a restart it loads as recorded") in listing

    unlinked = runtime.cli("link", "rm", "counting/counter/counts", "counting/doubler/numbers", check=True).stdout
    assert unlinked.startswith("link counter/counts->doubler/numbers removed in stream counting")
    assert [link["key"] for link in graph_of(runtime, "counting")["links"]] == ["counter/counts->sink/rows"]
    removed = runtime.cli("node", "rm", "counting", "doubler", check=True).stdout
    assert removed.startswith("doubler removed from stream counting\n"), removed
    wait_for(lambda: pids(runtime, "counting") == before, timeout=30, what="doubler gone, the others as they were")
    assert not [f for f in runtime.shm_files() if "doubler" in f]  # its ring and status file went with it

    rows = read_jsonl(folder / "rows.jsonl")
    assert rows and {row["reader_pid"] for row in rows} == {before["sink"]}  # the sink never restarted


@pytest.mark.slow
def test_a_node_that_fails_to_start_is_reported_with_its_error_and_removed_again(runtime, project_venv, tmp_path):
    folder = counting_project(tmp_path, project_venv)
    runtime.cli("run", "-d", cwd=folder, check=True)
    before = running_pids(runtime, "counting", {"counter", "sink"})

    failed = runtime.cli("node", "add", "counting", "camera", "nodes.broken:NoCamera")
    assert failed.returncode == 1
    assert failed.stderr.strip() == (
        "error: node camera (nodes.broken:NoCamera) failed to start in stream counting: node camera raised "
        "RuntimeError: no camera at /dev/video9; it is removed again and the stream runs on as before: fix it and "
        "add it again; `tatolab logs --stream counting --node camera` shows its traceback"), failed.stderr
    entry = graph_of(runtime, "counting")
    assert [node["name"] for node in entry["nodes"]] == ["counter", "sink"]
    assert entry["changes"] == [] and entry["changed_since_recorded"] is False  # the stream is as it was
    assert pids(runtime, "counting") == before
    assert not [f for f in runtime.shm_files() if "camera" in f]
    logged = runtime.cli("logs", "--stream", "counting", "--node", "camera", check=True).stdout
    assert 'raise RuntimeError("no camera at /dev/video9")' in logged  # the traceback the answer points to

    again = runtime.cli("node", "add", "counting", "camera", "nodes.doubler:Doubler", check=True).stdout
    assert again.startswith("camera added to stream counting"), again  # the name is free again


@pytest.mark.slow
def test_a_kept_stream_changed_live_loads_as_recorded_after_a_runtime_restart(project_venv, tmp_path):
    folder = counting_project(tmp_path, project_venv)
    rt = Runtime(tmp_path / "rt").start()
    try:
        rt.cli("run", "-d", cwd=folder, check=True)
        running_pids(rt, "counting", {"counter", "sink"})
        rt.cli("node", "add", "counting", "doubler", "nodes.doubler:Doubler", check=True)
        rt.cli("link", "add", "counting/counter/counts", "counting/doubler/numbers", check=True)
        rt.cli("link", "rm", "counting/counter/counts", "counting/sink/rows", check=True)
        changed = graph_of(rt, "counting")
        assert changed["changed_since_recorded"] is True and len(changed["changes"]) == 3
        assert [link["key"] for link in changed["links"]] == ["counter/counts->doubler/numbers"]

        output = rt.stop()
        rt.start()
        wait_for(lambda: rt.stream_names() == ["counting"], timeout=60, what="the kept stream to load again")
        running_pids(rt, "counting", {"counter", "sink"})
        again = graph_of(rt, "counting")
        assert again["changed_since_recorded"] is False and again["changes"] == []
        assert [link["key"] for link in again["links"]] == ["counter/counts->sink/rows"]
        assert "changed live" not in rt.cli("streams", check=True).stdout
        logged = rt.cli("logs", "--stream", "counting", check=True).stdout
        assert ("the live changes to stream counting are dropped (add_node doubler, connect "
                "counter/counts->doubler/numbers, disconnect counter/counts->sink/rows): it loads as recorded when "
                "it starts again") in logged, logged + output
    finally:
        rt.cli("rm", "counting")
        rt.stop()
    assert rt.leftover_processes() == [] and rt.shm_files() == []


@pytest.mark.slow
def test_a_dev_reload_drops_the_live_changes_and_says_so(runtime, project_venv, tmp_path):
    folder = counting_project(tmp_path, project_venv)
    dev = runtime.popen_cli("dev", cwd=folder)
    running_pids(runtime, "counting", {"counter", "sink"})
    added = runtime.cli("node", "add", "counting", "doubler", "nodes.doubler:Doubler", check=True).stdout
    assert "a live change" not in added  # attached: there is no record to load after a restart
    entry = graph_of(runtime, "counting")
    assert "changed_since_recorded" not in entry and [c["node"] for c in entry["changes"]] == ["doubler"]

    (folder / "stream.py").write_text((folder / "stream.py").read_text() + "\n# saved again\n")
    running_pids(runtime, "counting", {"counter", "sink"})  # the reload: the stream function's graph again
    assert graph_of(runtime, "counting")["changes"] == []
    logged = runtime.cli("logs", "--stream", "counting", check=True).stdout
    assert ("the live changes to stream counting are dropped (add_node doubler): it loads as its stream function "
            "builds it when it starts again") in logged, logged
    dev.send_signal(2)
    dev.wait(timeout=30)
