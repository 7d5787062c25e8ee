"""`tatolab dev`: a real runtime, a project, and saves that reload the stream."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK, TAGGER

from tatolab._cli.dev import NOTHING_LOADED, describe
from tatolab._runtime.rules.saves import is_watched
from tatolab._runtime.lifecycle.watch import QUIET_MS, watched_dirs

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.tagger import Tagger
from nodes.sinks import OrderedSink


@stream
def edited(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter)
    tagger = stream_builder.add(Tagger)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), tagger.input("numbers"))
    stream_builder.connect(tagger.output("tagged"), sink.input("rows"))
"""

def project_files(version: int = 1) -> dict[str, str]:
    return {
        "stream.py": STREAM,
        "nodes/__init__.py": "",
        "nodes/counter.py": COUNTER,
        "nodes/tagger.py": TAGGER.format(version=version),
        "nodes/sinks.py": SINK,
    }


class Dev:
    """`tatolab dev` in a project, its output collected as it comes."""

    def __init__(self, runtime: Runtime, project: Path, *args: str) -> None:
        self.process = runtime.popen_cli("dev", *args, cwd=project)
        self.lines: list[str] = []
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def count(self, text: str) -> int:
        return sum(line.startswith(text) for line in self.lines)

    def ctrl_c(self) -> int:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=20)
        self._reader.join(timeout=10)
        self.err = self.process.stderr.read()  # type: ignore[union-attr]
        return self.process.returncode


def versions(project: Path) -> list[int]:
    return [row["v"] for row in read_jsonl(project / "out.jsonl")]


def wait_version(project: Path, version: int, what: str, after: int = 0) -> None:
    wait_for(lambda: version in versions(project)[after:], timeout=30, what=what)


def save_tagger(project: Path, version: int | str) -> None:
    (project / "nodes" / "tagger.py").write_text(TAGGER.format(version=version).lstrip())


@pytest.mark.slow
def test_an_edit_reaches_the_sink_a_syntax_error_keeps_the_old_version_and_ctrl_c_leaves_nothing(
    runtime, project_venv, tmp_path
):
    project = make_project(tmp_path / "edited", project_venv, project_files(version=1))
    dev = Dev(runtime, project)
    try:
        wait_version(project, 1, "bags from version 1")
        # the nodes may write before dev's own line reaches its terminal
        wait_for(lambda: "edited running attached (3 nodes" in dev.output, what="dev to say the stream runs")
        save_tagger(project, 2)
        wait_version(project, 2, "bags from the edited tagger")
        wait_for(lambda: dev.count("reloaded edited (1 of 3 nodes restarted)") == 1, what="the reload line")

        (project / "nodes" / "tagger.py").write_text("VERSION = (\n")
        wait_for(lambda: "keeps running the previous version" in dev.output, what="the compile error")
        assert "SyntaxError" in dev.output and "tagger.py" in dev.output
        seen = len(versions(project))
        wait_for(lambda: len(versions(project)) > seen + 20, what="the previous version to keep producing")
        assert set(versions(project)[seen:]) == {2}

        save_tagger(project, 3)
        wait_version(project, 3, "bags from the fixed tagger")
        assert runtime.stream_names() == ["edited"]
        assert len(runtime.node_pids()) == 3
    finally:
        code = dev.ctrl_c()
    assert code == 130
    wait_for(lambda: runtime.stream_names() == [], what="dev's stream to unload")
    wait_for(lambda: runtime.node_pids() == [], what="node processes to end")
    assert runtime.leftover_processes() == []
    wait_for(lambda: runtime.shm_files() == [], what="its rings to be removed (after its nodes ended)")


@pytest.mark.slow
def test_dev_on_a_broken_project_says_nothing_is_loaded_then_loads_the_fix(runtime, project_venv, tmp_path):
    files = project_files()
    files["nodes/tagger.py"] = "VERSION = (\n"
    project = make_project(tmp_path / "edited", project_venv, files)
    dev = Dev(runtime, project)
    try:
        wait_for(lambda: NOTHING_LOADED in dev.lines, timeout=30, what=f"{NOTHING_LOADED!r}")
        assert "SyntaxError" in dev.output
        assert runtime.stream_names() == []
        save_tagger(project, 5)
        wait_version(project, 5, "bags once the project is fixed")
    finally:
        dev.ctrl_c()
    wait_for(lambda: runtime.stream_names() == [], what="dev's stream to unload")


@pytest.mark.slow
def test_ten_saves_within_200_ms_cause_one_reload(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "edited", project_venv, project_files(version=1))
    dev = Dev(runtime, project)
    try:
        wait_version(project, 1, "bags from version 1")
        # A burst is saves less than the quiet window apart. On a busy machine this test's own
        # process may stall between two saves longer than that, and then the runtime rightly sees
        # two bursts; such a try proves nothing and the next one is made. A try whose saves were a
        # burst must give exactly one reload.
        for attempt in range(1, 4):
            reloads, saves = dev.count("reloaded"), dev.count("saved")
            burst = range(100 * attempt, 100 * attempt + 10)
            saved_at = []
            for version in burst:  # an editor, a formatter, a git checkout: ten writes in 150 ms
                save_tagger(project, version)
                saved_at.append(time.monotonic())
                time.sleep(0.015)
            wait_version(project, burst[-1], "bags from the last save of the burst")
            # A later save is a reload of its own; any extra reload from the burst would come before it.
            save_tagger(project, 100 * attempt + 50)
            wait_version(project, 100 * attempt + 50, "bags from the save after the burst")
            wait_for(lambda: dev.count("reloaded") >= reloads + 2, what="the later save's reload")
            longest_gap_ms = max(b - a for a, b in zip(saved_at, saved_at[1:])) * 1000
            if longest_gap_ms < QUIET_MS:
                break
        else:
            pytest.skip(f"this machine never wrote ten saves less than {QUIET_MS} ms apart")
        assert dev.count("reloaded") == reloads + 2, dev.output
        assert dev.count("saved") == saves + 2, dev.output
        assert not set(versions(project)) & set(burst[:-1]), "a version from the middle of the burst ran"
    finally:
        dev.ctrl_c()


@pytest.mark.slow
def test_dev_loads_again_by_itself_after_the_runtime_is_killed_and_restarted(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "edited", project_venv, project_files(version=1))
    dev = Dev(runtime, project)
    try:
        wait_version(project, 1, "bags from version 1")
        runtime.stop(signal.SIGKILL)
        wait_for(lambda: "the runtime went down" in dev.output, what="dev to say the runtime went down")
        save_tagger(project, 2)  # saved while no runtime runs: the next load picks it up
        runtime.start()
        wait_version(project, 2, "bags after the runtime came back")
        assert "the runtime is back" in dev.output
        assert runtime.stream_names() == ["edited"]
    finally:
        dev.ctrl_c()
        wait_for(lambda: runtime.stream_names() == [] if runtime.process else True, what="the stream to unload")
        runtime.stop()
    assert runtime.leftover_processes() == []
    assert runtime.shm_files() == []


@pytest.mark.slow
def test_dev_on_a_kept_streams_name_is_refused_even_while_it_is_stopped(runtime, project_venv, tmp_path):
    kept = make_project(tmp_path / "kept", project_venv, project_files(version=1))
    copy = make_project(tmp_path / "copy", project_venv, project_files(version=1))
    runtime.cli("run", "-d", cwd=kept, check=True)
    try:
        # stopped, it still holds its name (running, it does too: test_core.py holds the name rule for both)
        runtime.cli("stop", "edited", check=True)
        refused = runtime.cli("dev", cwd=copy)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "tatolab rm edited" in refused.stderr and "--name" in refused.stderr
        renamed = Dev(runtime, copy, "--name", "edited_dev")
        try:
            wait_for(lambda: "edited_dev" in runtime.stream_names(), timeout=30, what="the copy under --name")
        finally:
            renamed.ctrl_c()
    finally:
        runtime.cli("rm", "edited")


def test_watched_paths_follow_the_docs(tmp_path):
    project = tmp_path / "p"
    for folder in ("nodes/sub", ".venv/lib", ".git", "nodes/__pycache__", ".streamlib/logs", "other-env"):
        (project / folder).mkdir(parents=True)
    (project / "other-env" / "pyvenv.cfg").write_text("")
    assert watched_dirs(project) == [str(project), str(project / "nodes"), str(project / "nodes" / "sub")]
    assert is_watched(project, str(project / "stream.py"))
    assert is_watched(project, str(project / "pyproject.toml"))
    assert is_watched(project, str(project / "nodes" / "sub" / "x.py"))
    assert not is_watched(project, str(project / "notes.txt"))
    assert not is_watched(project, str(project / "stream.py~"))
    assert not is_watched(project, str(project / ".venv" / "lib" / "x.py"))
    assert not is_watched(project, str(project / "nodes" / "__pycache__" / "x.py"))


def test_what_dev_prints_for_each_event():
    failed = {"event": "failed", "error": "boom\nTraceback", "running": None}
    assert describe(failed).splitlines()[-1] == NOTHING_LOADED
    still = describe({**failed, "running": "edited"})
    assert still.endswith("edited keeps running the previous version until a save that works")
    assert describe({"event": "loaded", "name": "s", "nodes": 1, "project": "/p", "reload": False}).startswith(
        "s running attached (1 node, project /p)")
    assert describe({"event": "loaded", "name": "s", "nodes": 3, "project": "/p", "reload": True,
                     "timings_ms": {"since_change": 420}}) == "reloaded s (3 nodes) 0.42 s after the save"
    assert describe({"event": "loaded", "name": "s", "nodes": 3, "project": "/p", "reload": True, "restarted": [],
                     "kept": ["a", "b", "c"], "timings_ms": {"since_change": 50}}) == (
        "reloaded s (0 of 3 nodes restarted) 0.05 s after the save")
