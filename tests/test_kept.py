"""Kept streams with a real tatolabd: `run -d`, stop/start/rm, coming back after restarts and
crashes, the two-crash rule, records on disk, which stream to load, and the systemd unit."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import venv
from pathlib import Path

import pytest

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK

HINT = "`tatolab start {0}` retries it, `tatolab rm {0}` forgets it."


def counting_files(function: str, out: str = "out.jsonl") -> dict[str, str]:
    """A two-node stream (a counter and a sink writing ``out``) named after ``function``."""
    stream_py = f'''
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink


@stream
def {function}(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter)
    sink = stream_builder.add(OrderedSink, config={{"path": "{out}"}})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
'''
    return {"stream.py": stream_py, "nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/sinks.py": SINK}


def keep(runtime: Runtime, project: Path, *args: str, cwd: Path | None = None) -> str:
    """`tatolab run -d`: returns its one line of output."""
    result = runtime.cli("run", "-d", *args, cwd=cwd or project, check=True)
    return result.stdout


def produces(path: Path, what: str = "") -> None:
    """``path`` gains rows from now on: the stream is running."""
    before = len(read_jsonl(path))
    wait_for(lambda: len(read_jsonl(path)) >= before + 10, timeout=40, what=what or f"new rows in {path}")


def table(runtime: Runtime) -> dict[str, list[str]]:
    """`tatolab streams` as name -> [state, nodes, project]."""
    out = runtime.cli("streams", check=True).stdout.split("\n\n")[0].splitlines()
    assert out[0].split() == ["NAME", "STATE", "NODES", "PROJECT"]
    return {line.split()[0]: line.split()[1:] for line in out[1:] if line.strip()}


def failed_lines(runtime: Runtime) -> list[str]:
    out = runtime.cli("streams", check=True).stdout
    return out.split("\n\n", 1)[1].splitlines() if "\n\n" in out else []


def restart(runtime: Runtime, sig: int = signal.SIGTERM) -> None:
    runtime.stop(sig)
    if sig == signal.SIGKILL:
        wait_for(lambda: runtime.leftover_processes() == [], what="node processes to end with the killed runtime")
    runtime.start()


def state_folder(runtime: Runtime) -> Path:
    return runtime.root / "state" / "tatolab"


@pytest.mark.slow
def test_run_d_returns_at_once_and_the_stream_outlives_the_command_and_a_killed_runtime(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "motion-watcher", project_venv, counting_files("motion_watcher")).resolve()
    assert keep(runtime, project) == f"motion_watcher kept (project {project})\n"
    produces(project / "out.jsonl", "the kept stream to produce after `run -d` exited")
    assert table(runtime) == {"motion_watcher": ["kept", "2", str(project)]}

    record = json.loads((state_folder(runtime) / "streams" / "motion_watcher.json").read_text())
    assert record["project"] == str(project)
    assert record["python"] == str(project / ".venv" / "bin" / "python")
    assert record["stopped"] is False and record["failed"] is None
    assert [n["name"] for n in record["graph"]["nodes"]] == ["counter", "orderedsink"]
    assert record["exposures"] == record["graph"]["exposures"]

    restart(runtime, signal.SIGKILL)
    produces(project / "out.jsonl", "the kept stream to come back, with no command, after SIGKILL")
    assert table(runtime)["motion_watcher"][0] == "kept"


@pytest.mark.slow
def test_stop_survives_a_restart_start_brings_it_back_and_rm_forgets_it(runtime, project_venv, tmp_path):
    garage = make_project(tmp_path / "garage", project_venv, counting_files("garage")).resolve()
    watcher = make_project(tmp_path / "watcher", project_venv, counting_files("watcher")).resolve()
    keep(runtime, garage)
    keep(runtime, watcher)
    produces(garage / "out.jsonl")

    stopped = runtime.cli("stop", "garage", check=True)
    assert "garage stopped" in stopped.stdout
    wait_for(lambda: len(runtime.node_pids()) == 2, what="garage's node processes to end")
    assert table(runtime)["garage"] == ["stopped", "-", str(garage)]
    # a kept stream holds its name even while stopped: an attached load of that name is refused
    refused = runtime.cli("run", cwd=garage)
    assert refused.returncode == 1
    assert f"kept from {garage} (stopped)" in refused.stderr and "tatolab rm garage" in refused.stderr

    restart(runtime)
    # kept streams load one at a time in name order, so once watcher runs, garage was passed over
    produces(watcher / "out.jsonl", "watcher to come back")
    assert table(runtime)["garage"] == ["stopped", "-", str(garage)]
    assert len(runtime.node_pids()) == 2

    started = runtime.cli("start", "garage", check=True)
    assert started.stdout.startswith("garage started")
    produces(garage / "out.jsonl", "garage to run again after `start`")
    assert table(runtime)["garage"] == ["kept", "2", str(garage)]

    removed = runtime.cli("rm", "garage", check=True)
    assert "garage removed" in removed.stdout
    assert "garage" not in table(runtime)
    assert not (state_folder(runtime) / "streams" / "garage.json").exists()  # so no restart brings it back

    for command in ("stop", "start", "rm"):
        unknown = runtime.cli(command, "nope")
        assert unknown.returncode == 1
        assert "no stream named nope" in unknown.stderr and "watcher (kept)" in unknown.stderr


@pytest.mark.slow
def test_a_crash_while_a_stream_loads_involves_only_that_stream(runtime, project_venv, tmp_path):
    steady = make_project(tmp_path / "steady", project_venv, counting_files("a_steady")).resolve()
    files = counting_files("b_slow")
    # importing the sink hangs while the flag file exists, holding b_slow in its loading step
    files["nodes/sinks.py"] = "import os, time\nif os.path.exists('slow-import'):\n    time.sleep(120)\n" + SINK
    slow = make_project(tmp_path / "slow", project_venv, files).resolve()
    keep(runtime, steady)
    keep(runtime, slow)
    produces(slow / "out.jsonl")
    (slow / "slow-import").touch()
    marker = state_folder(runtime) / "running.json"

    def loading_slow() -> bool:
        state = json.loads(marker.read_text())
        return state["loading"] == ["b_slow"] and state["loaded"] == ["a_steady"]

    restart(runtime)  # kept streams load in name order: a_steady is running while b_slow loads
    for _ in range(2):
        wait_for(loading_slow, timeout=30, what="the marker to say b_slow is loading and a_steady running")
        restart(runtime, signal.SIGKILL)
    (slow / "slow-import").unlink()
    produces(steady / "out.jsonl", "a_steady, running at both crashes but not involved, to start")
    assert table(runtime)["b_slow"][0] == "failed" and table(runtime)["a_steady"][0] == "kept"
    [line] = failed_lines(runtime)
    assert "(the runtime died while it was being loaded, 2 times)" in line
    assert line.endswith(". " + HINT.format("b_slow"))
    # a_steady was running at both crashes, in its node processes: only b_slow was involved (test_core.py
    # holds the marker's states, and test_crash_rule.py the rule, for kills that involve no stream)
    crashes = [r["message"] for r in read_jsonl(state_folder(runtime) / "runtime.jsonl")
               if "did not stop cleanly" in r["message"]]
    assert len(crashes) == 2
    assert all(m.endswith("kept streams involved: b_slow (while it was being loaded)") for m in crashes)

    retried = runtime.cli("start", "b_slow", check=True)
    assert retried.stdout.startswith("b_slow retried and running")
    produces(slow / "out.jsonl", "b_slow to run again after `start`")
    assert table(runtime)["b_slow"][0] == "kept" and failed_lines(runtime) == []


@pytest.mark.slow
def test_a_stream_that_cannot_load_is_marked_failed_while_the_others_start(runtime, project_venv, tmp_path):
    no_venv = make_project(tmp_path / "a", project_venv, counting_files("a_novenv")).resolve()
    no_module = make_project(tmp_path / "b", project_venv, counting_files("b_nomodule")).resolve()
    fine = make_project(tmp_path / "c", project_venv, counting_files("c_fine")).resolve()
    for project in (no_venv, no_module, fine):
        keep(runtime, project)
    wait_for(lambda: len(runtime.node_pids()) == 6, timeout=30, what="three kept streams running")

    runtime.stop()
    (no_venv / ".venv").unlink()
    [kept_copy] = (state_folder(runtime) / "sources" / "b_nomodule").iterdir()
    (kept_copy / "nodes" / "sinks.py").unlink()  # its nodes import the copy kept at `run -d`
    runtime.start()
    produces(fine / "out.jsonl", "the loadable stream to start")
    rows = table(runtime)
    assert rows["a_novenv"][0] == "failed" and rows["b_nomodule"][0] == "failed" and rows["c_fine"][0] == "kept"
    lines = failed_lines(runtime)
    assert lines[0] == (
        f"a_novenv failed: its project's Python environment is gone: {no_venv}/.venv/bin/python does not exist; "
        f"`tatolab sdk {no_venv}` makes it again with this runtime's SDK. " + HINT.format("a_novenv")
    )
    assert lines[1].startswith("b_nomodule failed: node orderedsink (nodes.sinks:OrderedSink) cannot be imported")
    assert "No module named 'nodes.sinks'" in lines[1] and lines[1].endswith(HINT.format("b_nomodule"))

    again = runtime.cli("start", "a_novenv")
    assert again.returncode == 1 and "a_novenv failed again" in again.stderr and ".venv/bin/python" in again.stderr
    (no_venv / ".venv").symlink_to(project_venv, target_is_directory=True)  # fix it, then retry
    runtime.cli("start", "a_novenv", check=True)
    produces(no_venv / "out.jsonl", "the repaired stream to run")


@pytest.mark.slow
def test_run_d_again_replaces_the_recorded_graph_and_edits_alone_change_nothing(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "p", project_venv, counting_files("recorder", "first.jsonl")).resolve()
    keep(runtime, project)
    produces(project / "first.jsonl")

    (project / "stream.py").write_text(counting_files("recorder", "second.jsonl")["stream.py"])
    restart(runtime)
    produces(project / "first.jsonl", "the recorded graph, not the edited file, after a restart")
    assert not (project / "second.jsonl").exists()

    assert keep(runtime, project) == f"recorder kept (project {project})\n"
    produces(project / "second.jsonl", "the new version after `run -d` again")
    wait_for(lambda: len(runtime.node_pids()) == 2, what="the old version's nodes to end")
    assert table(runtime) == {"recorder": ["kept", "2", str(project)]}
    record = json.loads((state_folder(runtime) / "streams" / "recorder.json").read_text())
    assert record["graph"]["nodes"][1]["config"]["path"] == "second.jsonl"

    other = make_project(tmp_path / "other", project_venv, counting_files("recorder")).resolve()
    refused = runtime.cli("run", "-d", cwd=other)
    assert refused.returncode == 1
    assert f"kept from {project}" in refused.stderr and "--name" in refused.stderr

    (project / "stream.py").write_text(counting_files("recorder")["stream.py"] + "\nraise RuntimeError('half edited')\n")
    broken = runtime.cli("run", "-d", cwd=project)
    assert broken.returncode == 1 and "half edited" in broken.stderr
    produces(project / "second.jsonl", "the kept version to keep running after a failed `run -d`")


@pytest.mark.slow
def test_a_truncated_record_is_reported_and_the_runtime_still_starts(runtime, project_venv, tmp_path):
    cut = make_project(tmp_path / "cut", project_venv, counting_files("cut")).resolve()
    whole = make_project(tmp_path / "whole", project_venv, counting_files("whole")).resolve()
    keep(runtime, cut)
    keep(runtime, whole)
    runtime.stop()
    record = state_folder(runtime) / "streams" / "cut.json"
    data = record.read_bytes()
    size = data.index(json.dumps(str(cut)).encode()) + len(json.dumps(str(cut))) + 1  # cut just past its project
    record.write_bytes(data[:size])

    runtime.start()
    produces(whole / "out.jsonl", "the other kept stream to start")
    assert table(runtime)["cut"] == ["failed", "-", str(cut)]
    [line] = failed_lines(runtime)
    assert line.startswith(f"cut failed: its record {record} is damaged and cannot be read ({size} bytes, ")
    logged = [r for r in read_jsonl(state_folder(runtime) / "runtime.jsonl") if "cut" in r["message"]]
    assert any(str(record) in r["message"] and r["level"] == "error" for r in logged)

    assert runtime.cli("rm", "cut", check=True).returncode == 0
    assert not record.exists()
    keep(runtime, cut)  # kept again from its project
    produces(cut / "out.jsonl")


TAG_NODE = """
import json
from dataclasses import dataclass
from tatolab.stream import node


@dataclass
class TagConfig:
    tag: str


@node(execution="continuous", interval_ms=100)
class Tag:
    def __init__(self, config: TagConfig) -> None:
        self.tag = config.tag

    def process(self, ctx) -> None:
        with open(self.tag + ".jsonl", "a") as out:
            out.write(json.dumps({"tag": self.tag}) + "\\n")
"""


def tagged(*functions: str, node_module: str = "nodes.tag") -> str:
    body = f"from tatolab.stream import StreamBuilder, stream\nfrom {node_module} import Tag\n"
    for function in functions:
        body += (f"\n\n@stream\ndef {function}(stream_builder: StreamBuilder) -> None:\n"
                 f"    stream_builder.add(Tag, config={{'tag': '{function}'}})\n")
    return body


def installed_package_venv(path: Path, project_venv: Path) -> Path:
    """A project .venv with `acme_streams` installed in its site-packages, and tatolab through a .pth."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = path / "lib" / version / "site-packages"
    (site / "tatolab-test.pth").write_text(str(project_venv / "lib" / version / "site-packages") + "\n")
    package = site / "acme_streams"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tag.py").write_text(TAG_NODE)
    (package / "rover.py").write_text(tagged("camera_rig", "other_rig", node_module="acme_streams.tag"))
    return path


@pytest.mark.slow
def test_every_target_form_loads_the_right_function(runtime, project_venv, tmp_path):
    files = {"stream.py": tagged("recorder", "viewer"), "cameras.py": tagged("front_door"),
             "nodes/__init__.py": "", "nodes/tag.py": TAG_NODE}
    cams = make_project(tmp_path / "cams", project_venv, files).resolve()
    solo = make_project(tmp_path / "solo", project_venv, {**files, "stream.py": tagged("solo")}).resolve()
    rover = make_project(tmp_path / "rover", None, {"README": "a project using an installed package\n"}).resolve()
    installed_package_venv(rover / ".venv", project_venv)

    cases = [
        (cams, ["stream.py:recorder"], cams, "recorder", "recorder"),
        (cams, ["cameras.py:front_door"], cams, "front_door", "front_door"),
        (cams, ["-f", "cameras.py"], cams, "front_door", "front_door"),
        (rover, ["acme_streams.rover:camera_rig"], rover, "camera_rig", "camera_rig"),
        (tmp_path, ["--dir", str(solo)], solo, "solo", "solo"),
        (cams, ["stream.py:viewer", "--name", "viewer_test"], cams, "viewer_test", "viewer"),
    ]
    for cwd, args, project, name, function in cases:
        out = runtime.cli("run", "-d", *args, cwd=cwd, check=True).stdout
        assert out == f"{name} kept (project {project})\n", args
        wait_for(lambda: read_jsonl(project / f"{function}.jsonl"), timeout=30, what=f"{function} to run ({args})")
        assert table(runtime)[name] == ["kept", "1", str(project)]
        record = json.loads((state_folder(runtime) / "streams" / f"{name}.json").read_text())
        assert record["graph"]["function"] == function
        runtime.cli("rm", name, check=True)
        wait_for(lambda: runtime.node_pids() == [], what=f"{name} to unload")
        (project / f"{function}.jsonl").unlink()

    wrong = runtime.cli("run", "-d", "stream.py:nope", cwd=cams)
    assert wrong.returncode == 1 and "recorder, viewer" in wrong.stderr
    several = runtime.cli("run", "-d", cwd=cams)
    assert several.returncode == 1 and "several @stream functions" in several.stderr
    assert table(runtime) == {}


@pytest.mark.slow
def test_every_url_safe_name_survives_a_restart_and_a_record_that_cannot_start_is_failed(
    runtime, project_venv, tmp_path
):
    hidden = make_project(tmp_path / "hidden", project_venv, counting_files("cam")).resolve()
    dots = make_project(tmp_path / "dots", project_venv, counting_files("dots")).resolve()
    dash = make_project(tmp_path / "dash", project_venv, counting_files("dash")).resolve()
    ghost = make_project(tmp_path / "ghost", project_venv, counting_files("ghost")).resolve()
    assert keep(runtime, hidden, "--name=.cam") == f".cam kept (project {hidden})\n"
    assert keep(runtime, dots, "--name", "..-..-x") == f"..-..-x kept (project {dots})\n"
    assert keep(runtime, dash, "--name=-x") == f"-x kept (project {dash})\n"  # a name, never an option
    keep(runtime, ghost)
    produces(dash / "out.jsonl")
    runtime.stop()
    record = state_folder(runtime) / "streams" / "ghost.json"
    data = json.loads(record.read_text())
    data["graph"]["links"][0]["to"]["node"] = "missing"  # valid JSON, a link to no node
    record.write_text(json.dumps(data))

    runtime.start()
    for project in (hidden, dots, dash):
        produces(project / "out.jsonl", f"the stream kept from {project.name} to come back after a restart")
    rows = table(runtime)
    assert {name: row[0] for name, row in rows.items()} == {
        ".cam": "kept", "..-..-x": "kept", "-x": "kept", "ghost": "failed"}
    assert rows["ghost"] == ["failed", "-", str(ghost)]  # no node count: nothing of it runs
    assert len(runtime.node_pids()) == 6
    [line] = failed_lines(runtime)
    assert line.startswith(f"ghost failed: its record {record} is damaged and cannot be read (")
    assert "links to missing/rows, which is not an input of its nodes" in line
    # the hint is what works: `start` refuses a damaged record, `rm` then `run -d` keep it again
    assert line.endswith(f"`tatolab rm ghost` forgets it; then `tatolab run -d` in {ghost} keeps it again.")
    refused = runtime.cli("start", "ghost")
    assert refused.returncode == 1 and "already running" not in refused.stderr
    assert "ghost cannot be started: its record" in refused.stderr
    runtime.cli("rm", "ghost", check=True)
    keep(runtime, ghost)
    produces(ghost / "out.jsonl", "ghost kept again after `rm` and `run -d`")
    runtime.cli("rm", "--", "-x", check=True)
    assert "-x" not in table(runtime)


VERSION_NODE = """
import json, os
from tatolab.stream import node

VERSION = "{version}"


@node(execution="continuous", interval_ms=1000)
class Version:
    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self) -> None:
        with open("version.json.tmp", "w") as f:
            json.dump({{"version": VERSION, "pid": os.getpid()}}, f)
        os.replace("version.json.tmp", "version.json")

    def process(self, ctx) -> None:
        pass
"""

VERSION_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.version import Version


@stream
def versioned(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Version)
"""


def version_seen(project: Path, not_pid: int | None = None) -> dict:
    def read() -> dict | None:
        try:
            data = json.loads((project / "version.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if data["pid"] != not_pid else None

    return wait_for(read, timeout=40, what="the version node to (re)start and write version.json")


@pytest.mark.slow
def test_a_kept_stream_runs_the_code_kept_at_run_d_after_edits_and_restarts(runtime, project_venv, tmp_path):
    files = {"stream.py": VERSION_STREAM, "nodes/__init__.py": "", "nodes/version.py": VERSION_NODE.format(version="kept"),
             ".git/hook.py": "", "nodes/__pycache__/stale.py": "", "notes.txt": "not a Python source"}
    project = make_project(tmp_path / "versioned", project_venv, files).resolve()
    keep(runtime, project)
    first = version_seen(project)
    assert first["version"] == "kept"
    sources = state_folder(runtime) / "sources" / "versioned"
    [snapshot] = list(sources.iterdir())
    # the node's own bytecode may come; other files are links to the live ones
    copied = [p for p in snapshot.rglob("*") if "__pycache__" not in p.parts and not p.is_symlink()]
    kept_files = sorted(str(p.relative_to(snapshot)) for p in copied if p.is_file())
    assert kept_files == ["nodes/__init__.py", "nodes/version.py", "stream.py"]  # no .venv, .git, __pycache__
    assert all(stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600)
               for p in [sources.parent, sources, snapshot, *copied])
    assert (snapshot / "notes.txt").resolve() == project / "notes.txt"
    assert not (snapshot / ".git").exists() and not (snapshot / ".venv").exists()

    (project / "nodes" / "version.py").write_text(VERSION_NODE.format(version="edited"))
    os.kill(first["pid"], signal.SIGKILL)  # the node restarts: from what was kept
    second = version_seen(project, not_pid=first["pid"])
    assert second["version"] == "kept"
    restart(runtime, signal.SIGKILL)  # the runtime restarts: the same
    third = version_seen(project, not_pid=second["pid"])
    assert third["version"] == "kept"

    attached = runtime.popen_cli("run", "--name", "live", cwd=project)  # attached runs use the live files
    try:
        assert version_seen(project, not_pid=third["pid"])["version"] == "edited"
    finally:
        attached.send_signal(signal.SIGINT)
        attached.communicate(timeout=20)

    keep(runtime, project)  # run -d again: the edit is kept now, in a new snapshot replacing the old
    assert version_seen(project, not_pid=third["pid"])["version"] == "edited"
    [replaced] = list(sources.iterdir())
    assert replaced != snapshot and "edited" in (replaced / "nodes" / "version.py").read_text()

    runtime.cli("rm", "versioned", check=True)
    assert not sources.exists()
