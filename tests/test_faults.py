"""Faults that must not stop recovery (issue 9, findings 5-8 and 16): a node with a helper
process, a full disk, running out of descriptors, a slow attached terminal, a runtime dying
mid-request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import psutil
import pytest

from harness import BIN, Runtime, graph_node, make_project, one_node_files, read_jsonl, wait_for

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


def alive(pid: int) -> bool:
    """A node (tatolab._host) or its helper (sleep 600) still running under ``pid``: a pid whose process
    ended may already be another's (pid_max can be 32768, and other test workers start many)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and (
            process.cmdline()[:2] == ["sleep", "600"] or "tatolab._host" in process.cmdline())
    except psutil.Error:
        return False


def helpers(project) -> list[tuple[int, int]]:
    path = project / "helpers.txt"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines() if line.strip()]


def helped_project(tmp_path, project_venv):
    """A project whose one node (Spawner) starts a helper process in its setup."""
    return make_project(tmp_path / "helped", project_venv, one_node_files("helped", "Spawner", HELPER_NODE))


def keep_and_wait_for_helper(runtime: Runtime, project) -> tuple[int, int]:
    """`tatolab run -d` the project; (the node's pid, its helper's pid) once it started the helper."""
    runtime.cli("run", "-d", cwd=project, check=True)
    return wait_for(lambda: helpers(project), timeout=30, what="the node to start its helper")[0]


def test_a_killed_node_with_a_helper_is_restarted_and_its_helper_ends(runtime, project_venv, tmp_path):
    project = helped_project(tmp_path, project_venv)
    node, helper = keep_and_wait_for_helper(runtime, project)
    os.kill(node, signal.SIGKILL)
    entry = wait_for(
        lambda: (n := graph_node(runtime, "helped", "spawner")).get("restarts", 0) >= 1 and n.get("pid") not in (None, node) and n,
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
    project = helped_project(tmp_path, project_venv)
    try:
        _, helper = keep_and_wait_for_helper(runtime, project)
        runtime.stop(signal.SIGKILL)
        wait_for(lambda: not alive(helper), timeout=10, what="the helper to end with the runtime")
    finally:
        runtime.start()  # the next runtime reaps what the killed one left, then stops cleanly
        runtime.stop()
    assert runtime.leftover_processes() == []
    assert all(not alive(h) for _, h in helpers(project))


def test_a_killed_reaper_is_replaced_and_the_new_one_ends_a_killed_runtimes_groups(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = helped_project(tmp_path, project_venv)
    try:
        _, helper = keep_and_wait_for_helper(runtime, project)
        first = wait_for(runtime.reaper_pid, timeout=10, what="the runtime's reaper")
        os.kill(first, signal.SIGKILL)  # as an OOM kill might
        second = wait_for(lambda: (pid := runtime.reaper_pid()) not in (None, first) and pid, timeout=10,
                          what="the runtime to start another reaper")
        log = (runtime.root / "state" / "tatolab" / "runtime.jsonl").read_text()
        assert f"the reaper (pid {first}) ended" in log and "starting another" in log
        runtime.stop(signal.SIGKILL)
        wait_for(lambda: not alive(helper), timeout=10, what="the new reaper to end the helper")
        wait_for(lambda: not alive(second), timeout=10, what="the reaper to exit once done")
    finally:
        runtime.start()
        runtime.stop()
    assert runtime.leftover_processes() == []


def test_a_node_group_whose_reaper_is_gone_too_is_ended_by_the_next_runtime(tmp_path, project_venv):
    runtime = Runtime(tmp_path / "rt").start()
    project = helped_project(tmp_path, project_venv)
    try:
        node, helper = keep_and_wait_for_helper(runtime, project)
        reaper = wait_for(runtime.reaper_pid, timeout=10, what="the runtime's reaper")
        os.kill(runtime.process.pid, signal.SIGSTOP)  # so it cannot start another reaper
        os.kill(reaper, signal.SIGKILL)
        wait_for(lambda: not alive(reaper), what="the reaper to die")
        runtime.stop(signal.SIGKILL)
        wait_for(lambda: not alive(node), timeout=10, what="the node to die with the runtime")
        assert alive(helper), "with its reaper gone, nothing ended the group yet"
        runtime.start()  # it ends the groups the killed runtime's nodes left, then loads the kept stream again
        wait_for(lambda: not alive(helper), timeout=10, what="the next runtime to end the left group")
    finally:
        runtime.stop()
        for _, pid in helpers(project):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert all(not alive(h) for _, h in helpers(project))


def test_a_killed_runtimes_shared_memory_is_removed_by_any_later_runtime(tmp_path, project_venv):
    killed = Runtime(tmp_path / "killed").start()
    project = helped_project(tmp_path, project_venv)
    try:
        killed.cli("run", "-d", cwd=project, check=True)
        wait_for(lambda: helpers(project), timeout=30, what="the node to start")
        assert killed.shm_files(), "the running stream has its rings in shared memory"
        killed.stop(signal.SIGKILL)  # it cannot remove its own files
        wait_for(lambda: killed.leftover_processes() == [], timeout=10, what="the killed runtime's nodes to end")
        # (a runtime another test worker starts meanwhile may reap them first: any later runtime does)
        other = Runtime(tmp_path / "other").start()  # another state folder: never reaps by name
        other.stop()
        assert killed.shm_files() == [], "the dead runtime's files outlived it"
    finally:
        for _, pid in helpers(project):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        killed.start()
        killed.stop()
    assert killed.shm_files() == [] and killed.leftover_processes() == []


# -- a full disk ---------------------------------------------------------------------------

CHATTY_NODE = """
import os
from tatolab.stream import node


@node(execution="continuous", interval_ms=50)
class Chatty:
    @node.output()
    def out(self) -> dict: ...

    def setup(self, ctx) -> None:
        print(f"started as {os.getpid()}", flush=True)

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"pid": os.getpid()})
        print("tick", flush=True)  # a log that keeps writing: a full disk shows at once
"""


@pytest.fixture
def small_disk(tmp_path):
    """Mount small tmpfs folders (a disk the test can fill); unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (the CI runs the tests as root)")
    mounted = []

    def mount(path, size: str = "4m"):
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); it needs CAP_SYS_ADMIN")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(folder) -> None:
    """Write ``folder``'s disk full."""
    with open(folder / "filler", "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == 28, exc
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass


def test_a_full_state_disk_neither_crashes_a_stop_nor_keeps_the_runtime_from_starting(tmp_path, project_venv, small_disk):
    runtime = Runtime(tmp_path / "rt")
    state = small_disk(runtime.root / "state")
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY_NODE))
    try:
        runtime.start()
        runtime.cli("run", "-d", cwd=project, check=True)
        wait_for(lambda: graph_node(runtime, "chatty", "chatty").get("pid"), timeout=30, what="the kept node to run")
        fill(state)
        output = runtime.stop(signal.SIGTERM)
        assert runtime.leftover_processes() == [] and runtime.shm_files() == []
        assert not runtime.socket.exists(), f"the stop was cut short:\n{output}"
        assert "stopped cleanly" in output, output
        assert "Traceback" not in output, output

        runtime.start()  # on the full disk: it starts, loads the kept stream, says what it cannot write
        entry = wait_for(lambda: (n := graph_node(runtime, "chatty", "chatty")).get("pid") and n, timeout=30,
                         what="the kept stream to load on a full disk")
        assert entry["state"] in ("starting", "running")
        listing = runtime.cli("streams", check=True).stdout
        assert "chatty" in runtime.stream_names()
        assert f"the runtime cannot write {state}" in listing and "No space left on device" in listing, listing
        output = runtime.stop(signal.SIGTERM)
        assert "stopped cleanly" in output and "Traceback" not in output, output
        assert "did not stop cleanly" not in output, output  # the clean stop, although its marker was unwritable
        assert f"cannot write {state}" in output, output
        assert not runtime.socket.exists()
    finally:
        runtime.stop()
    assert runtime.leftover_processes() == [] and runtime.shm_files() == []


def test_a_refused_start_is_not_taken_for_a_crash_by_the_next_start(tmp_path):
    runtime = Runtime(tmp_path / "rt")
    try:
        runtime.start()
        runtime.stop(signal.SIGTERM)
        for setting in ({"TATOLAB_MOQ_PUBLIC": "tailnet"}, {"TATOLAB_MOQ_PORT": "-1"}):
            refused = subprocess.run([str(BIN / "tatolabd")], env={**runtime.env, **setting}, capture_output=True,
                                     text=True, timeout=60)
            assert refused.returncode == 1 and "is not allowed" in refused.stderr, refused.stderr
        runtime.start()
        output = runtime.stop(signal.SIGTERM)
    finally:
        runtime.stop()
    assert "did not stop cleanly" not in output, output


def test_a_node_killed_while_the_project_disk_is_full_is_restarted(runtime, project_venv, tmp_path, small_disk):
    disk = small_disk(tmp_path / "disk", "16m")
    project = make_project(disk / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY_NODE))
    log = project / ".streamlib" / "logs" / "chatty.jsonl"
    runtime.cli("run", "-d", cwd=project, check=True)
    first = wait_for(lambda: graph_node(runtime, "chatty", "chatty").get("pid"), timeout=30, what="the node to run")
    wait_for(lambda: any("started as" in r["message"] for r in read_jsonl(log)), what="the node's first line")
    fill(disk)
    with open(log, "ab", buffering=0) as f:  # the page the log ends in too: no record fits anywhere
        try:
            while f.write(b"\n" * 64):
                pass
        except OSError:
            pass
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (p := graph_node(runtime, "chatty", "chatty").get("pid")) not in (None, first) and p,
                      timeout=30, what="the node to be restarted on the full disk")
    wait_for(lambda: "No space left on device" in runtime.cli("streams", check=True).stdout,
             what="`tatolab streams` to say the log cannot be written")
    (disk / "filler").unlink()
    os.kill(second, signal.SIGKILL)  # its restart is said in the log again, with what was lost
    wait_for(lambda: any("could not be written to this log (No space left on device)" in r.get("message", "")
                         for r in read_jsonl(log)), timeout=30, what="the log to say what it lost")
    wait_for(lambda: graph_node(runtime, "chatty", "chatty").get("pid") not in (None, first, second),
             timeout=30, what="the second restart")
    runtime.cli("stop", "chatty", check=True)


# -- the CLI facing a runtime that dies, stalls, or a reader that stops reading ------------

class FakeRuntime:
    """A socket where the runtime's would be, doing one bad thing to every connection."""

    def __init__(self, root, behaviour: str) -> None:
        import socket
        import threading

        from harness import listen_as_runtime

        self.env, self.listener = listen_as_runtime(root)
        path = self.listener.getsockname()
        self.held = []
        self.behaviour = behaviour
        self.thread = threading.Thread(target=self._serve, daemon=True)
        if behaviour == "deaf":  # accepts nothing: its backlog fills, as a runtime's out of descriptors does
            while True:
                conn = socket.socket(socket.AF_UNIX)
                conn.setblocking(False)
                try:
                    conn.connect(str(path))
                except BlockingIOError:
                    conn.close()
                    break
                self.held.append(conn)
        else:
            self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.behaviour == "die":
                conn.recv(1)  # the request is half read when it dies: the client sees a reset
                conn.close()
            else:
                self.held.append(conn)  # "stall": never answers

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def cli(env: dict, *args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    from harness import BIN

    return subprocess.run([str(BIN / "tatolab"), *args], env=env, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=60)


def test_a_runtime_dying_mid_request_gets_one_clear_line(tmp_path):
    fake = FakeRuntime(tmp_path, "die")
    try:
        result = cli(fake.env, "streams")
    finally:
        fake.close()
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "ConnectionResetError" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the runtime closed the connection before answering"), lines[0]


@pytest.mark.parametrize("behaviour", ["stall", "deaf"], ids=["accepts-never-answers", "accepts-nothing"])
def test_the_cli_gives_up_on_a_runtime_that_never_answers(tmp_path, behaviour):
    fake = FakeRuntime(tmp_path, behaviour)
    try:
        result = cli(dict(fake.env, TATOLAB_CLI_TIMEOUT_S="1"), "streams")
    finally:
        fake.close()
    assert result.returncode == 1
    assert result.stderr.startswith("error: the runtime at ") and "did not answer within 1 s" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_closed_output_pipe_ends_the_cli_quietly(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY_NODE))
    runtime.cli("run", "-d", cwd=project, check=True)
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -4` that has already gone: every write meets a closed pipe
    try:
        result = cli(runtime.env, "streams", stdout=write_end)
    finally:
        os.close(write_end)
    assert "went away" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == ""
    runtime.cli("stop", "chatty", check=True)


# -- running out of descriptors ----------------------------------------------------------

def test_idle_connections_cannot_starve_node_restarts_or_the_cli(tmp_path, project_venv):
    import socket

    runtime = Runtime(tmp_path / "rt")
    runtime.env["TATOLAB_IDLE_TIMEOUT_S"] = "3"
    runtime.env["TATOLAB_CLI_TIMEOUT_S"] = "5"
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY_NODE))
    idle: list[socket.socket] = []
    try:
        runtime.start()
        runtime.cli("run", "-d", cwd=project, check=True)
        first = wait_for(lambda: graph_node(runtime, "chatty", "chatty").get("pid"), timeout=30, what="the node to run")
        psutil.Process(runtime.process.pid).rlimit(psutil.RLIMIT_NOFILE, (160, 160))  # `ulimit -n 160`
        # Far more idle connections than the runtime has descriptors for: connect until 400 are
        # open or its backlog stays full for 2 s (it accepts no more).
        stuck_after = time.monotonic() + 2.0
        while len(idle) < 400 and time.monotonic() < stuck_after:
            conn = socket.socket(socket.AF_UNIX)
            conn.setblocking(False)
            try:
                conn.connect(str(runtime.socket))
            except BlockingIOError:
                conn.close()
                time.sleep(0.01)  # the backlog is full: let the runtime accept some
                continue
            idle.append(conn)
            stuck_after = time.monotonic() + 2.0
        os.kill(first, signal.SIGKILL)

        def restarted() -> bool:
            result = runtime.cli("graph", "--stream", "chatty")  # refused while the idle ones hold the slots
            if result.returncode != 0:
                assert "connections already" in result.stderr or "did not answer" in result.stderr, result.stderr
                return False
            node = json.loads(result.stdout)["streams"][0]["nodes"][0]
            return node["pid"] not in (None, first)

        wait_for(restarted, timeout=30, what="the node to be restarted while idle connections are open")
        listing = runtime.cli("streams", check=True)
        assert "chatty" in listing.stdout
    finally:
        for conn in idle:
            conn.close()
        output = runtime.stop()
    assert output.count("Traceback") <= 1, output[-3000:]
    assert "refusing connections" in output, output[-3000:]
    assert runtime.leftover_processes() == [] and runtime.shm_files() == []


# -- a terminal that reads slowly ----------------------------------------------------------

FLOOD_NODE = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=1)
class Flood:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        for _ in range(500):
            self.n += 1
            print(f"line {self.n} " + "x" * 200)
        with open("progress.tmp", "w") as f:
            f.write(str(self.n))
        __import__("os").replace("progress.tmp", "progress")
"""


def test_a_stopped_attached_terminal_costs_records_not_runtime_memory(runtime, project_venv, tmp_path):
    import threading

    project = make_project(tmp_path / "flood", project_venv, one_node_files("flood", "Flood", FLOOD_NODE))
    progress = project / "progress"

    def printed() -> int:
        try:
            return int(progress.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    run = runtime.popen_cli("run", cwd=project)
    seen: list[str] = []
    try:
        wait_for(lambda: printed() > 2000, timeout=60, what="the node to log")
        daemon = psutil.Process(runtime.process.pid)
        run.send_signal(signal.SIGSTOP)  # a terminal that reads nothing at all for a while
        start = printed()
        before = daemon.memory_info().rss
        wait_for(lambda: printed() > start + 150_000, timeout=240, what="150,000 more lines logged")
        grown = daemon.memory_info().rss - before
        print(f"runtime grew {grown / 2**20:.1f} MiB while {printed() - start} lines were logged to a stopped terminal")
        assert grown < 50 * 1024 * 1024, f"the runtime grew by {grown / 2**20:.0f} MiB for one stopped terminal"
        run.send_signal(signal.SIGCONT)
        reader = threading.Thread(target=lambda: seen.extend(run.stdout), daemon=True)
        reader.start()
        wait_for(lambda: told_dropped(seen) > 100_000, timeout=60,
                 what="the terminal to be told what it missed")  # most of what was logged meanwhile
    finally:
        run.send_signal(signal.SIGCONT)
        run.send_signal(signal.SIGINT)
        run.wait(timeout=30)


def told_dropped(lines: list[str]) -> int:
    """How many records the terminal was told it missed."""
    marker = " log record(s) dropped here"
    return sum(int(line.split(marker)[0].split()[-1]) for line in list(lines) if marker in line)


def test_a_feed_drops_beyond_its_limit_and_says_how_many_where():
    from tatolab._runtime.feed import Feed

    feed = Feed(lambda n: f"{n} dropped", limit=3, droppable=lambda item: item != "ended")
    for item in ["a", "b", "c", "d", "e", "ended", "f"]:
        feed.put_nowait(item)
    got = []
    while not feed.empty():
        got.append(feed.get_nowait())
    assert got == ["a", "b", "c", "2 dropped", "ended", "1 dropped"]
    assert feed.dropped == 3
