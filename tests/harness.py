"""A real tatolabd on temporary paths, projects with their own .venv, and the CLI, for tests."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

import psutil

from tatolab._control import paths
from tatolab._links import shm

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHM_FOLDER = shm.default_folder()  # where every ring and status file lives
# Every Runtime a test makes, so conftest can end it (and the commands it started) even when the test fails.
LIVE: list["Runtime"] = []
# The socket folders runtimes made for themselves: each test's goes with it (conftest), any left (bench/ scripts,
# which use these runtimes too) when the process ends.
MADE_RUN_DIRS: list[str] = []
atexit.register(lambda: [shutil.rmtree(folder, ignore_errors=True) for folder in MADE_RUN_DIRS])


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "condition",
             poll_s: float = 0.02) -> object:
    """Poll ``condition`` until it is truthy; the synchronisation every test (and bench/) uses instead of sleeps."""
    deadline = time.monotonic() + timeout
    while True:
        began = time.monotonic()
        value = condition()
        if value:
            return value
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        # a condition that costs (a CLI command is a process start) is looked at less often: at most a fifth
        # of the wait is spent on it, so a busy machine's slower looks are not met with more of them
        time.sleep(min(max(poll_s, 4 * (now - began)), 0.5))


def free_udp_port() -> int:
    """A UDP port on loopback that nothing holds now."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
    finally:
        probe.close()


def is_reaper(process: psutil.Process) -> bool:
    """The runtime's reaper (tatolab/_runtime/processes/reaper.py): it ends the nodes' groups should the
    runtime be killed; it is no node."""
    try:
        return "tatolab._runtime.processes.reaper" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _made_run_dir() -> str:
    folder = tempfile.mkdtemp(prefix="tl-run-")
    MADE_RUN_DIRS.append(folder)
    return folder


class Runtime:
    """A tatolabd with its socket, state folder and machine lock under ``root``."""

    def __init__(self, root: Path, run_dir: Path | None = None) -> None:
        """``run_dir``: its XDG_RUNTIME_DIR (the socket's folder), else a short one of its own."""
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ)
        self.env.update(
            # a short folder of its own for the socket (a Unix socket's path holds at most 107 bytes, and a test's
            # temporary folder, under a pytest-xdist worker's, can take most of them); removed with the test
            XDG_RUNTIME_DIR=str(run_dir) if run_dir is not None else _made_run_dir(),
            XDG_STATE_HOME=str(root / "state"),
            TATOLAB_MACHINE_LOCK=str(root / "machine.lock"),
            # its MoQ relay's own port, one it binds itself (never one another program may take from under a
            # test, or a user's runtime holds: 4443); graph names it (moq_port)
            TATOLAB_MOQ_PORT="0",
            TATOLAB_MOQ_PUBLIC="",  # public outputs on loopback only, whatever tailnet the machine is on
            TATOLAB_FOXGLOVE_PORT="0",  # its Foxglove server on any free port (a user's runtime may hold 8765)
            PYTHONUNBUFFERED="1",
        )
        self.env.pop("VIRTUAL_ENV", None)
        self.run_dir = Path(self.env["XDG_RUNTIME_DIR"])
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.run_dir / "streamlib" / "local-api.sock"
        self.process: subprocess.Popen | None = None
        # every process of this runtime seen, by pid, as psutil knows it: a pid is reused once its process
        # has ended (pid_max can be 32768), and a leak check by pid alone would count, and kill, a stranger
        self.seen: dict[int, psutil.Process] = {}
        self.commands: list[subprocess.Popen] = []  # `tatolab dev`, `run`, `tap`... started by popen_cli
        LIVE.append(self)

    @property
    def shm_prefix(self) -> str:
        """Full path prefix of this runtime's shared-memory files, in the user's own folder."""
        return paths.shm_namespace(self.root / "state" / "tatolab", make_folder=False)

    def shm_files(self) -> list[str]:
        """This runtime's shared-memory files (also any in /dev/shm itself, where none may be);
        while it runs, less its ``.owner`` record, which lives exactly as long as it does."""
        name = os.path.basename(self.shm_prefix)
        running = self.process is not None and self.process.poll() is None
        found = []
        for folder in (SHM_FOLDER, "/dev/shm"):
            try:
                found += [os.path.join(folder, e) for e in os.listdir(folder)
                          if e.startswith(name) and not (running and e == name + ".owner")]
            except FileNotFoundError:
                pass
        return sorted(found)

    def start(self, output: int | None = subprocess.PIPE, timeout: float = 60.0) -> "Runtime":
        """Start it; its output is kept for ``stop`` to return (``output``: DEVNULL drops it, as a
        long benchmark must, None shows it)."""
        self.process = subprocess.Popen(
            [str(BIN / "tatolabd")], env=self.env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self.answers, timeout, what="tatolabd to answer on its socket")
        if self.env["TATOLAB_MOQ_PORT"] == "0":  # the port it chose is its port from now on, as a user's 4443 is
            self.env["TATOLAB_MOQ_PORT"] = str(wait_for(self.moq_port, timeout, what="tatolabd to say its MoQ port"))
        return self

    def answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            output = self.process.stdout.read().decode() if self.process.stdout else ""
            raise AssertionError(f"tatolabd exited with {self.process.returncode}:\n{output}")
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(str(self.socket))
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def moq_port(self) -> int | None:
        """The port its MoQ relay serves on (and its viewer page), as its start's log line says (None
        until it has said it)."""
        log = self.root / "state" / "tatolab" / "runtime.jsonl"
        for line in reversed(log.read_text().splitlines() if log.exists() else []):
            if '"relay_port"' in line:
                return json.loads(line)["fields"]["relay_port"]
        return None

    def node_pids(self) -> list[int]:
        """Node hosts and compiles started by this runtime; they and its warm interpreters
        (tatolab._host.warm, one per project .venv) are remembered for the leak check."""
        if self.process is None or self.process.poll() is not None:
            return []
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        pids = []
        for child in children:
            self.seen.setdefault(child.pid, child)
            try:
                if is_reaper(child) or "tatolab._host.warm" in child.cmdline():
                    continue
            except psutil.Error:
                continue
            pids.append(child.pid)
        return pids

    def reaper_pid(self) -> int | None:
        """The pid of this runtime's reaper, or None while it has none."""
        if self.process is None or self.process.poll() is not None:
            return None
        for child in psutil.Process(self.process.pid).children():
            if is_reaper(child):
                self.seen.setdefault(child.pid, child)
                return child.pid
        return None

    def warm_pids(self) -> list[int]:
        """This runtime's warm interpreters."""
        if self.process is None or self.process.poll() is not None:
            return []
        pids = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if "tatolab._host.warm" in child.cmdline():
                    pids.append(child.pid)
                    self.seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
        return pids

    def remove_run_dir(self) -> None:
        """Its socket's folder, once the test is over (a later test never reuses it), when it made its own."""
        if self.run_dir.name.startswith("tl-run-"):
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def stop(self, sig: int = signal.SIGTERM) -> str:
        self.node_pids()
        output = ""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout:
            output = self.process.stdout.read().decode()
            self.process.stdout.close()
        self.process = None
        return output

    def leftover_processes(self) -> list[int]:
        def alive(process: psutil.Process) -> bool:
            try:  # is_running: this very process (its pid and start time), not a later one given its pid
                return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False

        kept = set(self.warm_pids()) | {self.reaper_pid()}  # a running runtime keeps these; once it stopped, none may be left
        return [pid for pid, process in self.seen.items() if pid not in kept and alive(process)]

    def cli(self, *args: str, cwd: Path | None = None, timeout: float = 60, check: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(BIN / "tatolab"), *args], env=env or self.env, cwd=cwd, capture_output=True, text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"tatolab {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def popen_cli(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
        command = subprocess.Popen(
            [str(BIN / "tatolab"), *args], env=env or self.env, cwd=cwd, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
        self.commands.append(command)
        return command

    def end_commands(self) -> list[str]:
        """End every command popen_cli started that is still running (a test that failed
        half-way leaves them); returns the ones it had to end, for the report."""
        ended = []
        for command in self.commands:
            if command.poll() is None:
                ended.append(" ".join(command.args[1:]))
                command.send_signal(signal.SIGINT)  # what Ctrl-C does: hang up, unloading the stream
                try:
                    command.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    command.kill()
                    command.wait()
            for pipe in (command.stdout, command.stderr):
                if pipe is not None:
                    pipe.close()
        self.commands.clear()
        return ended

    def stream_names(self) -> list[str]:
        out = self.cli("streams", check=True).stdout.split("\n\n")[0].splitlines()[1:]  # the table ends at a blank line
        return [line.split()[0] for line in out if line.strip() and not line.startswith(" ")]


# nodes/pace.py of a project: a ~100-byte bag ({"n": 0, 1, ...}) every millisecond on output `bags`,
# for the MoQ tests and bench/fanout.py
PACE_NODE = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=1)
class Pace:
    @node.output()
    def bags(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("bags", {"n": self.n, "pad": b"x" * 80})
        self.n += 1
"""


def make_project(path: Path, venv: Path, files: dict[str, str]) -> Path:
    """A project folder whose .venv is the session's shared test environment."""
    path.mkdir(parents=True, exist_ok=True)
    if venv is not None:
        (path / ".venv").symlink_to(venv, target_is_directory=True)
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip())
    return path


def one_node_files(name: str, cls: str, code: str) -> dict[str, str]:
    """A project of one stream ``name`` holding one node, class ``cls`` in ``nodes/<name>.py``."""
    stream = (
        "from tatolab.stream import StreamBuilder, stream\n"
        f"from nodes.{name} import {cls}\n\n\n"
        f"@stream\ndef {name}(stream_builder: StreamBuilder) -> None:\n    stream_builder.add({cls})\n"
    )
    return {"stream.py": stream, "nodes/__init__.py": "", f"nodes/{name}.py": code}


def graph_node(runtime: Runtime, stream: str, name: str) -> dict:
    """The node's entry in `graph`, or {} while the stream has not listed it yet (still loading)."""
    g = json.loads(runtime.cli("graph", "--stream", stream, check=True).stdout)
    nodes = [n for s in g["streams"] for n in s["nodes"] if n["name"] == name]
    return nodes[0] if nodes else {}


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.endswith("}"):
            rows.append(json.loads(line))
    return rows


def listen_as_runtime(root: Path) -> tuple[dict[str, str], socket.socket]:
    """A listening socket where a runtime under ``root`` would answer, and the environment a CLI
    finds it with: for tests that play the runtime's part (a fake that misbehaves or records)."""
    where = Runtime(root)  # never started: its paths and environment
    where.socket.parent.mkdir(parents=True, mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(where.socket))
    listener.listen(8)
    return where.env, listener
