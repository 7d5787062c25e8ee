"""The loading command's environment reaches the stream function and its nodes, attached and
kept (after a runtime restart too), and the runtime's own variables never do."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import pytest

from harness import Runtime, make_project, wait_for

PROBE = '''
import json, os
from dataclasses import dataclass
from tatolab.stream import node


@dataclass
class ProbeConfig:
    camera_at_compile: str


@node(execution="continuous", interval_ms=1000)
class Probe:
    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self, config: ProbeConfig) -> None:
        seen = {
            "camera": os.environ.get("CAMERA"),
            "camera_at_compile": config.camera_at_compile,
            "runtime_only": os.environ.get("RUNTIME_ONLY"),
            "tatolab": sorted(k for k in os.environ if k.startswith("TATOLAB_")),
            "pid": os.getpid(),
        }
        with open("env.json.tmp", "w") as f:
            json.dump(seen, f)
        os.replace("env.json.tmp", "env.json")

    def process(self, ctx) -> None:
        pass
'''

STREAM = '''
import os
from tatolab.stream import StreamBuilder, stream
from nodes.probe import Probe


@stream
def {name}(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Probe, config={{"camera_at_compile": os.environ.get("CAMERA", "unset")}})
'''


def probe_project(path: Path, venv: Path, name: str) -> Path:
    files = {"stream.py": STREAM.format(name=name), "nodes/__init__.py": "", "nodes/probe.py": PROBE}
    return make_project(path, venv, files).resolve()


def seen(project: Path, not_pid: int | None = None) -> dict:
    """What the probe node saw, once a node process (other than ``not_pid``) has written it."""
    def read() -> dict | None:
        try:
            data = json.loads((project / "env.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if data["pid"] != not_pid else None

    return wait_for(read, timeout=40, what=f"the probe node of {project.name} to write env.json")


def command_env(runtime: Runtime, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in runtime.env.items() if k != "RUNTIME_ONLY"}
    env.update(extra)
    return env


def runtime_with_its_own_variable(tmp_path: Path) -> Runtime:
    rt = Runtime(tmp_path / "rt")
    rt.env["RUNTIME_ONLY"] = "the runtime's, not the command's"
    rt.env["CAMERA"] = "/dev/video0"  # the runtime's value: the command's must win
    return rt


def stop_quietly(rt: Runtime) -> None:
    output = rt.stop()
    assert rt.leftover_processes() == [], f"processes left behind: {rt.leftover_processes()}\n{output}"
    assert rt.shm_files() == []


@pytest.mark.slow
def test_attached_run_and_dev_get_the_commands_environment_and_not_the_runtimes(project_venv, tmp_path):
    rt = runtime_with_its_own_variable(tmp_path).start()
    try:
        project = probe_project(tmp_path / "cams", project_venv, "cams")
        for command in (("run",), ("dev",)):
            (project / "env.json").unlink(missing_ok=True)
            process = rt.popen_cli(*command, cwd=project, env=command_env(rt, CAMERA="/dev/video2"))
            try:
                got = seen(project)
            finally:
                process.send_signal(signal.SIGINT)
                process.communicate(timeout=20)
            assert got["camera"] == "/dev/video2", command  # the node process
            assert got["camera_at_compile"] == "/dev/video2", command  # the stream function
            assert got["runtime_only"] is None and got["tatolab"] == [], command
            wait_for(lambda: rt.node_pids() == [], what=f"`tatolab {command[0]}`'s stream to unload")
    finally:
        stop_quietly(rt)


@pytest.mark.slow
def test_a_kept_stream_records_the_environment_of_run_d_and_gets_it_back_after_restarts(project_venv, tmp_path):
    rt = runtime_with_its_own_variable(tmp_path).start()
    try:
        project = probe_project(tmp_path / "door", project_venv, "door")
        rt.cli("run", "-d", cwd=project, check=True, env=command_env(rt, CAMERA="/dev/video2"))
        first = seen(project)
        assert (first["camera"], first["camera_at_compile"]) == ("/dev/video2", "/dev/video2")
        assert first["runtime_only"] is None and first["tatolab"] == []

        record = rt.root / "state" / "tatolab" / "streams" / "door.json"
        assert stat.S_IMODE(record.stat().st_mode) == 0o600  # the environment is the user's alone
        recorded = json.loads(record.read_text())["env"]
        assert recorded["CAMERA"] == "/dev/video2" and not any(k.startswith("TATOLAB_") for k in recorded)

        rt.stop(signal.SIGKILL)
        wait_for(lambda: rt.leftover_processes() == [], what="node processes to end with the killed runtime")
        rt.start()  # nothing but the record says /dev/video2 now
        again = seen(project, not_pid=first["pid"])
        assert (again["camera"], again["camera_at_compile"]) == ("/dev/video2", "/dev/video2")
        assert again["runtime_only"] is None and again["tatolab"] == []
    finally:
        stop_quietly(rt)
