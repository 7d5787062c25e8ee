"""Streams run: a real tatolabd, projects with their own .venv, node processes and links."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess

import psutil
import pytest

from tatolab._control import paths

from harness import BIN, Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK, pipeline_files


def node_pid(runtime: Runtime, address: str) -> int | None:
    for pid in runtime.node_pids():
        try:
            if psutil.Process(pid).cmdline()[-1:] == [address]:
                return pid
        except psutil.NoSuchProcess:
            continue
    return None


def stop_attached(run: subprocess.Popen) -> tuple[str, str]:
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=20)
    return out, err


@pytest.mark.slow
def test_ordered_pipeline_gets_every_bag_in_order_and_ctrl_c_leaves_nothing(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "pipeline", project_venv, pipeline_files(limit=300))
    run = runtime.popen_cli("run", cwd=project)
    out = project / "out.jsonl"
    wait_for(lambda: len(read_jsonl(out)) >= 300, timeout=30, what="300 bags at the sink")
    rows = read_jsonl(out)
    assert [row["n"] for row in rows] == list(range(300))
    assert all(row["doubled"] == 2 * row["n"] for row in rows)
    assert runtime.stream_names() == ["pipeline"]
    assert len(runtime.node_pids()) == 3

    stdout, _ = stop_attached(run)
    assert "pipeline running attached (3 nodes" in stdout
    wait_for(lambda: runtime.stream_names() == [], what="the stream to unload")
    wait_for(lambda: runtime.node_pids() == [], what="node processes to end")
    assert runtime.leftover_processes() == []
    wait_for(lambda: runtime.shm_files() == [], what="its rings to be removed (after its nodes ended)")


@pytest.mark.slow
def test_slow_newest_reader_gets_the_latest_while_the_source_keeps_its_rate(runtime, project_venv, tmp_path):
    files = {
        "stream.py": """
            from tatolab.stream import StreamBuilder, stream
            from nodes.counter import Counter
            from nodes.sinks import NewestSink, OrderedSink


            @stream
            def fanout(stream_builder: StreamBuilder) -> None:
                counter = stream_builder.add(Counter)
                slow = stream_builder.add(NewestSink, config={"path": "slow.jsonl", "delay_ms": 100})
                fast = stream_builder.add(OrderedSink, config={"path": "fast.jsonl"})
                stream_builder.connect(counter.output("counts"), slow.input("rows"))
                stream_builder.connect(counter.output("counts"), fast.input("rows"))
        """,
        "nodes/__init__.py": "",
        "nodes/counter.py": COUNTER,
        "nodes/sinks.py": SINK,
    }
    project = make_project(tmp_path / "fanout", project_venv, files)
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: len(read_jsonl(project / "slow.jsonl")) >= 10, timeout=30, what="10 reads by the slow reader")
        slow = read_jsonl(project / "slow.jsonl")
        fast = read_jsonl(project / "fast.jsonl")
    finally:
        stop_attached(run)
    # The fast ordered reader saw every bag the source sent, in order.
    assert [row["n"] for row in fast] == list(range(len(fast)))
    # The source was not held back by the slow reader (one read per 100 ms): over the same span it
    # sent many times what that reader read. Held back, it would send about as many as were read.
    # (Its own pace, 200 a second, is not asserted: on a busy machine a node may get less CPU.)
    span_s = (fast[-1]["sent_ns"] - fast[0]["sent_ns"]) / 1e9
    slow_span_s = (slow[-1]["read_ns"] - slow[0]["read_ns"]) / 1e9
    source_rate, reader_rate = len(fast) / span_s, (len(slow) - 1) / slow_span_s
    assert source_rate > 4 * reader_rate, (source_rate, reader_rate)
    # The slow newest reader skipped: each read is far ahead of the previous one and close to the
    # source. A reader handed queued bags instead would fall further behind with every read.
    gaps = [b["n"] - a["n"] for a, b in zip(slow, slow[1:])]
    assert min(gaps) >= 5, gaps
    lags_ms = sorted((row["read_ns"] - row["sent_ns"]) / 1e6 for row in slow[1:])
    assert lags_ms[len(lags_ms) // 2] < 50 and lags_ms[-1] < 1000, lags_ms


@pytest.mark.slow
def test_a_killed_node_comes_back_and_the_others_keep_going(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "pipeline", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    out = project / "out.jsonl"
    try:
        wait_for(lambda: len(read_jsonl(out)) >= 20, timeout=30, what="bags at the sink")
        doubler = wait_for(lambda: node_pid(runtime, "pipeline/doubler"), what="the doubler's process")
        counter = node_pid(runtime, "pipeline/counter")
        os.kill(doubler, signal.SIGKILL)
        before = len(read_jsonl(out))
        new_doubler = wait_for(
            lambda: (pid := node_pid(runtime, "pipeline/doubler")) and pid != doubler and pid,
            what="a new doubler process",
        )
        wait_for(lambda: len(read_jsonl(out)) > before + 20, timeout=20, what="bags again after the restart")
        assert node_pid(runtime, "pipeline/counter") == counter, "the counter was restarted too"
        assert new_doubler != doubler
        rows = read_jsonl(out)
        # the counter's own sequence never restarted
        assert rows[-1]["n"] > rows[before - 1]["n"]
    finally:
        stdout, _ = stop_attached(run)
    assert "doubler" in stdout and "was killed by SIGKILL" in stdout


@pytest.mark.slow
def test_run_exits_with_an_error_when_the_runtime_goes_down(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "pipeline", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: len(read_jsonl(project / "out.jsonl")) > 5, timeout=30, what="bags")
        runtime.stop(signal.SIGTERM)
        out, err = run.communicate(timeout=20)
    finally:
        runtime.stop()
    assert run.returncode != 0
    assert "the runtime stopped" in out + err
    assert runtime.leftover_processes() == []
    assert runtime.shm_files() == []


@pytest.mark.slow
def test_sigkilled_runtime_leaves_no_orphans_and_the_next_one_reaps_its_files(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = make_project(tmp_path / "pipeline", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: len(read_jsonl(project / "out.jsonl")) > 5, timeout=30, what="bags")
        nodes = runtime.node_pids()
        assert len(nodes) == 3 and runtime.shm_files()
        runtime.stop(signal.SIGKILL)
        # they end by themselves (no runtime is started until they have): the reaper ends their groups at
        # once; 10 s holds at ten times this machine's load
        wait_for(lambda: runtime.leftover_processes() == [], timeout=10.0, what="node processes to end by themselves")
        run.communicate(timeout=10)
        assert run.returncode != 0
        # its files are left (a killed process removes nothing) until a runtime starts: this one's next start,
        # or any other user runtime's beside it (another test's, in a parallel run), takes them away
        runtime.start()
        assert runtime.shm_files() == []
    finally:
        runtime.stop()
        if run.poll() is None:
            run.kill()


@pytest.mark.slow
def test_a_second_runtime_is_refused_naming_the_first(runtime):
    second = subprocess.run([str(BIN / "tatolabd")], env=runtime.env, capture_output=True, text=True, timeout=20)
    assert second.returncode == 1
    line = second.stderr.strip()
    me = f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    assert line.startswith(
        f"error: a runtime is already running on this machine: pid {runtime.process.pid}, user {me}, executable "
    ), line
    assert f"{BIN / 'tatolabd'} (lock @" in line, line
    assert line.endswith(". Use that one, or stop it first."), line


# The docs' text ("The runtime", Manage streams), character for character, for XDG_RUNTIME_DIR=/run/user/1000.
DOCS_NO_RUNTIME = (
    "error: no runtime is running on this machine: nothing answers at /run/user/1000/streamlib/local-api.sock. "
    "Start one by running `tatolabd` in a terminal."
)


def test_every_command_says_no_runtime_is_running(tmp_path):
    runtime = Runtime(tmp_path / "rt")  # never started
    expected = DOCS_NO_RUNTIME.replace("/run/user/1000", runtime.env["XDG_RUNTIME_DIR"])
    for args in (["streams"], ["run"], ["stop", "x"]):
        result = runtime.cli(*args, cwd=tmp_path)
        assert result.returncode == 1
        assert result.stderr.strip() == expected


def test_without_xdg_runtime_dir_the_socket_is_in_a_folder_of_the_users_own_in_tmp(tmp_path):
    runtime = Runtime(tmp_path / "rt")  # never started
    env = {k: v for k, v in runtime.env.items() if k != "XDG_RUNTIME_DIR"}
    result = subprocess.run([str(BIN / "tatolab"), "streams"], env=env, capture_output=True, text=True, timeout=60)
    place = paths.socket_place({})  # /run/user/<uid> when it is the user's with mode 0700, else /tmp
    where = f"{place.folder / 'local-api.sock'} (it looked there because XDG_RUNTIME_DIR is unset"
    where += f" and {place.looked[1]})" if len(place.looked) > 1 else ")"
    assert result.stderr.strip() == DOCS_NO_RUNTIME.replace("/run/user/1000/streamlib/local-api.sock", where)


@pytest.mark.slow
def test_socket_is_reachable_only_by_its_user(runtime):
    assert oct(runtime.socket.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(runtime.socket.stat().st_mode & 0o777) == "0o600"
    listening = [c for c in psutil.Process(runtime.process.pid).net_connections(kind="inet")]
    assert listening == []


@pytest.mark.slow
def test_a_name_in_use_is_refused_naming_its_project(runtime, project_venv, tmp_path):
    first = make_project(tmp_path / "first", project_venv, pipeline_files())
    second = make_project(tmp_path / "second", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=first)
    try:
        wait_for(lambda: runtime.stream_names() == ["pipeline"], what="the first stream")
        refused = runtime.cli("run", cwd=second)
        assert refused.returncode == 1
        assert f"already loaded from {first}" in refused.stderr
        assert "--name" in refused.stderr
        again = runtime.popen_cli("run", "--name", "pipeline_two", cwd=second)
        wait_for(lambda: sorted(runtime.stream_names()) == ["pipeline", "pipeline_two"], what="both streams")
        stop_attached(again)
    finally:
        stop_attached(run)


@pytest.mark.slow
def test_stop_ends_an_attached_run(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "p", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    wait_for(lambda: runtime.stream_names() == ["pipeline"], what="the stream")
    assert runtime.cli("stop", "pipeline").returncode == 0
    out, _ = run.communicate(timeout=20)
    assert run.returncode == 0
    assert "pipeline stopped: stopped by `tatolab stop`\n" in out  # the cause, an operation, in the CLI's words
    unknown = runtime.cli("stop", "nope")
    assert unknown.returncode == 1 and "no stream named nope" in unknown.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["sigterm", "closed-terminal", "killed"])
def test_ending_the_run_command_any_way_unloads_the_stream(runtime, project_venv, tmp_path, sig):
    project = make_project(tmp_path / "p", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    wait_for(lambda: len(read_jsonl(project / "out.jsonl")) > 3, timeout=30, what="bags")
    run.send_signal(sig)
    run.communicate(timeout=20)
    wait_for(lambda: runtime.stream_names() == [], what="the stream to unload")
    wait_for(lambda: runtime.node_pids() == [], what="its node processes to end")
    wait_for(lambda: runtime.shm_files() == [], what="its rings to be removed (after its nodes ended)")
