"""Share between streams: exposure, remote outputs wiring themselves, the tutorial streams."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import psutil

import pytest

from harness import REPO, Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK

SOURCE = """
from tatolab.stream import Exposure, StreamBuilder, stream
from nodes.counter import Counter


@stream
def source(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter)
    EXPOSE
"""

READER = """
from tatolab.stream import StreamBuilder, stream
from nodes.sinks import OrderedSink


@stream
def reader(stream_builder: StreamBuilder) -> None:
    sink = stream_builder.add(OrderedSink, config={"path": "got.jsonl"})
    stream_builder.connect(stream_builder.remote_output("ADDRESS"), sink.input("rows"))
"""


def source_project(root: Path, venv: Path, expose: str = "stream_builder.expose(counter.output('counts'))") -> Path:
    return make_project(root, venv, {
        "stream.py": SOURCE.replace("EXPOSE", expose),
        "nodes/__init__.py": "", "nodes/counter.py": COUNTER,
    })


def reader_project(root: Path, venv: Path, address: str = "source/counter/counts") -> Path:
    return make_project(root, venv, {
        "stream.py": READER.replace("ADDRESS", address),
        "nodes/__init__.py": "", "nodes/sinks.py": SINK,
    })


def remote_link(runtime: Runtime, stream: str) -> dict:
    """The stream's one remote link in `graph`, or {} while a loading stream lists none yet."""
    graph = json.loads(runtime.cli("graph", "--stream", stream, check=True).stdout)
    (entry,) = graph["streams"]
    links = [link for link in entry["links"] if "address" in link["from"]]
    assert len(links) <= 1, links
    return links[0] if links else {}


def node_pids(runtime: Runtime, address: str) -> list[int]:
    pids = []
    for pid in runtime.node_pids():
        try:
            if psutil.Process(pid).cmdline()[-1:] == [address]:
                pids.append(pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def grows(path: Path, by: int = 10, timeout: float = 20) -> None:
    count = len(read_jsonl(path))
    wait_for(lambda: len(read_jsonl(path)) >= count + by, timeout=timeout, what=f"{path.name} to grow")


@pytest.mark.slow
def test_a_private_output_is_read_by_another_stream_and_survives_its_source_stopping(runtime, project_venv, tmp_path):
    source = source_project(tmp_path / "source", project_venv)
    reader = reader_project(tmp_path / "reader", project_venv)
    runtime.cli("run", "-d", cwd=source, check=True)
    runtime.cli("run", "-d", cwd=reader, check=True)
    got = reader / "got.jsonl"
    grows(got)
    link = remote_link(runtime, "reader")
    assert link["state"] == "wired" and link["counters"]["read"] > 0
    sink_pid = node_pids(runtime, "reader/orderedsink")

    runtime.cli("stop", "source", check=True)
    link = remote_link(runtime, "reader")
    assert link["state"] == "waiting"
    assert "source is not running (stopped)" in link["reason"]
    assert node_pids(runtime, "reader/orderedsink") == sink_pid, "the reader must keep running"

    before = len(read_jsonl(got))
    runtime.cli("start", "source", check=True)
    wait_for(lambda: remote_link(runtime, "reader").get("state") == "wired", what="the link to wire again")
    grows(got)
    assert len(read_jsonl(got)) > before
    assert node_pids(runtime, "reader/orderedsink") == sink_pid, "no command touched the reader"


@pytest.mark.slow
def test_a_reader_loaded_before_its_source_wires_itself_when_the_source_loads(runtime, project_venv, tmp_path):
    reader = reader_project(tmp_path / "reader", project_venv)
    source = source_project(tmp_path / "source", project_venv)
    run_reader = runtime.popen_cli("run", cwd=reader)
    try:
        wait_for(lambda: "reader" in runtime.stream_names(), what="the reader to load")
        link = remote_link(runtime, "reader")
        assert link["state"] == "waiting" and "no stream named source" in link["reason"]
        run_source = runtime.popen_cli("run", cwd=source)
        try:
            grows(reader / "got.jsonl")
            assert remote_link(runtime, "reader")["state"] == "wired"
        finally:
            run_source.send_signal(signal.SIGINT)
            run_source.communicate(timeout=20)
        wait_for(lambda: remote_link(runtime, "reader").get("state") == "waiting", what="the link to wait again")
    finally:
        run_reader.send_signal(signal.SIGINT)
        out, _ = run_reader.communicate(timeout=20)
    assert "waiting: no stream named source is loaded" in out
    assert "wired to source" in out


@pytest.mark.slow
def test_expose_remove_cuts_a_live_reader_at_once(runtime, project_venv, tmp_path):
    source = source_project(tmp_path / "source", project_venv)
    reader = reader_project(tmp_path / "reader", project_venv)
    runtime.cli("run", "-d", cwd=source, check=True)
    runtime.cli("run", "-d", cwd=reader, check=True)
    grows(reader / "got.jsonl")

    cut = runtime.cli("expose", "source/counter/counts", "--remove", check=True)
    assert "cut readers: reader" in cut.stdout
    link = remote_link(runtime, "reader")
    assert link["state"] == "waiting" and "is internal" in link["reason"]

    # the level is recorded for the kept source: it still holds after a restart of the runtime
    runtime.stop()
    runtime.start()
    wait_for(lambda: sorted(runtime.stream_names()) == ["reader", "source"], what="both kept streams back")
    wait_for(lambda: "is internal" in (remote_link(runtime, "reader").get("reason") or ""), what="the reason after restart")

    runtime.cli("expose", "source/counter/counts", check=True)
    wait_for(lambda: remote_link(runtime, "reader").get("state") == "wired", what="the link to wire once exposed")
    grows(reader / "got.jsonl")

    # public, on a machine with no address outside it (the runtime's TATOLAB_MOQ_PUBLIC is empty): it says so, the
    # one true line; this machine's streams go on reading it
    public = runtime.cli("expose", "source/counter/counts", "--public", check=True)
    assert public.stdout.startswith("source/counter/counts is public (recorded for the kept stream), but nothing "
                                    "outside this machine can reach it yet"), public.stdout
    assert "your other machines can read it" not in public.stdout
    assert remote_link(runtime, "reader")["state"] == "wired"


@pytest.mark.slow
def test_an_internal_output_is_refused_with_how_to_expose_it(runtime, project_venv, tmp_path):
    source = source_project(tmp_path / "source", project_venv, expose="")
    reader = reader_project(tmp_path / "reader", project_venv)
    runtime.cli("run", "-d", cwd=source, check=True)
    run = runtime.popen_cli("run", cwd=reader)
    try:
        wait_for(lambda: "reader" in runtime.stream_names(), what="the reader to load")
        link = remote_link(runtime, "reader")
        assert link["state"] == "waiting"
        assert "source/counter/counts is internal" in link["reason"]
        assert "tatolab expose source/counter/counts" in link["reason"]
    finally:
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=20)
    assert "is internal" in out
    assert read_jsonl(reader / "got.jsonl") == []


@pytest.mark.slow
def test_odd_names_are_made_url_safe_in_addresses(runtime, project_venv, tmp_path):
    source = make_project(tmp_path / "source", project_venv, {
        "stream.py": """
            from tatolab.stream import StreamBuilder, stream
            from nodes.counter import Counter


            @stream
            def source(stream_builder: StreamBuilder) -> None:
                counter = stream_builder.add(Counter, name="Compteur Été #1")
                stream_builder.expose(counter.output("counts"))
        """,
        "nodes/__init__.py": "", "nodes/counter.py": COUNTER,
    })
    runtime.cli("run", "-d", "--name", "Caméra Avant!", cwd=source, check=True)
    assert "camera-avant-" in runtime.stream_names()
    graph = json.loads(runtime.cli("graph", "--stream", "camera-avant-", check=True).stdout)
    assert [node["name"] for node in graph["streams"][0]["nodes"]] == ["compteur-ete--1"]
    # readers may write the address as people would; every part is made URL-safe the same way
    reader = reader_project(tmp_path / "reader", project_venv, address="Caméra Avant!/Compteur Été #1/counts")
    runtime.cli("run", "-d", cwd=reader, check=True)
    grows(reader / "got.jsonl")
    assert remote_link(runtime, "reader")["state"] == "wired"
    # the full form, with this machine's name first, is the same address
    machine = json.loads(runtime.cli("graph", check=True).stdout)["runtime"]["name"]
    tapped = runtime.cli("tap", f"{machine}/camera-avant-/compteur-ete--1/counts", "--count", "2", check=True)
    assert len(tapped.stdout.strip().splitlines()) >= 2


def _tutorial_project(name: str, root: Path, venv: Path) -> Path:
    project = root / name
    shutil.copytree(REPO / "examples" / name, project, ignore=shutil.ignore_patterns(".venv", ".streamlib", "__pycache__"))
    (project / ".venv").symlink_to(venv, target_is_directory=True)
    return project


@pytest.mark.slow
def test_the_tutorial_streams_keep_logging_across_a_runtime_crash(runtime, project_venv, video_venv, tmp_path):
    watcher = _tutorial_project("motion-watcher", tmp_path, video_venv)  # its detector reads frame.cpu()
    log = _tutorial_project("motion-log", tmp_path, project_venv)
    kept = runtime.cli("run", "-d", cwd=watcher, check=True)
    assert kept.stdout.strip() == f"motion_watcher kept (project {watcher})"
    runtime.cli("run", "-d", cwd=log, check=True)
    events = log / "motion-events.jsonl"
    grows(events, by=3)
    assert {"frame", "score", "timestamp_ns"} <= set(read_jsonl(events)[-1])

    runtime.stop(signal.SIGKILL)
    runtime.start()
    grows(events, by=3)
    wait_for(lambda: remote_link(runtime, "motion_log").get("state") == "wired", what="motion_log's link wired again")

    # replacing the source re-wires the reader without touching it
    log_pid = node_pids(runtime, "motion_log/eventlog")
    runtime.cli("run", "-d", cwd=watcher, check=True)
    wait_for(lambda: remote_link(runtime, "motion_log").get("state") == "wired", what="the link to re-wire")
    grows(events, by=3)
    assert node_pids(runtime, "motion_log/eventlog") == log_pid
