"""A Runtime driven with a fake process starter: starting, refusing, restarting and stopping a
stream's nodes, with no node process (the supervision, the name rule and the host messages are
the runtime's own; only the spawning is faked)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Mapping

import pytest

from tatolab._control import paths
from tatolab._control.errors import ControlError
from tatolab._runtime.lifecycle.kept import KeptStreams
from tatolab._runtime.ops import OPS, load_all
from tatolab._runtime.rules.health import NodeState
from tatolab._runtime.runtime import Runtime

NO_SUCH_PID = 4_194_304 + 1000  # above any pid_max: signals to its "group" reach nobody


class FakeStdin:
    def __init__(self, process: "FakeProcess") -> None:
        self.process = process
        self.buffer = b""

    def write(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self.process.told(json.loads(line))

    def close(self) -> None:
        self.process.end(0)  # stdin closed: a node host stops


class FakeProcess:
    """What the starter hands back, behaving as a node host would: it reads its spec, then messages."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = FakeStdin(self)
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.exited: asyncio.Future = asyncio.get_running_loop().create_future()
        self.spec: dict[str, Any] | None = None
        self.messages: list[dict[str, Any]] = []

    def told(self, message: dict[str, Any]) -> None:
        if self.spec is None and "op" not in message:
            self.spec = message
            return
        self.messages.append(message)
        if message.get("op") == "stop":
            self.end(0)

    def end(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self.stdout.feed_eof()
            self.stderr.feed_eof()
            self.exited.set_result(None)

    def kill(self) -> None:
        self.end(-9)

    def send_signal(self, sig: int) -> None:
        self.end(-sig)

    def close_pipes(self) -> None:
        pass

    async def wait(self) -> int:
        await self.exited
        assert self.returncode is not None
        return self.returncode

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        await self.wait()
        return b"", b""


class FakeStarter:
    def __init__(self) -> None:
        self.started: list[tuple[str, list[str], FakeProcess]] = []
        self.closed = False

    async def start(self, python: Path, module: str, args: list[str], *, cwd: Path, env: Mapping[str, str],
                    log_fd: int | None = None, stdin: bool = True, limit: int = 2**16) -> FakeProcess:
        process = FakeProcess(NO_SUCH_PID + len(self.started))
        self.started.append((module, args, process))
        return process

    async def close(self) -> None:
        self.closed = True

    def node(self, name: str) -> FakeProcess:
        """The latest process started for node ``name``."""
        return [p for _, args, p in self.started if args[0].endswith("/" + name)][-1]


GRAPH = {
    "version": 1, "stream": "fake", "function": "fake", "module": "stream.py", "doc": None,
    "nodes": [
        {"name": "source", "class": "nodes:Source", "config": {}, "execution": "continuous", "interval_ms": 10,
         "inputs": [], "outputs": [{"port": "out"}]},
        {"name": "sink", "class": "nodes:Sink", "config": {}, "execution": "reactive",
         "inputs": [{"port": "in", "delivery_profile": "ordered"}], "outputs": []},
    ],
    "links": [{"from": {"node": "source", "port": "out"}, "to": {"node": "sink", "port": "in"}}],
    "exposures": [],
}


async def until(condition: Any, what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def places(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "run").mkdir()
    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").touch()
    return project


def test_a_runtime_runs_supervises_and_stops_a_stream_through_a_fake_starter(places):
    project = places
    load_all()

    async def scenario() -> None:
        starter = FakeStarter()
        runtime = Runtime(KeptStreams(paths.state_dir()), starter=starter)
        stream = await runtime.replace(project, GRAPH)
        await until(lambda: len(starter.started) == 2, "both nodes to start")
        assert sorted(args[0] for _, args, _ in starter.started) == ["fake/sink", "fake/source"]
        assert {module for module, _, _ in starter.started} == {"tatolab._host"}
        source, sink = starter.node("source"), starter.node("sink")
        await until(lambda: source.spec and sink.spec, "the specs")
        # the sink reads the source's ring, through the reader record the runtime gave it
        (link,) = sink.spec["inputs"]["in"]["links"]
        prefix = paths.loaded_stream_prefix(stream.instance)
        assert link["base"] == source.spec["outputs"]["out"]["base"] == paths.ring_base(prefix, "source", "out")
        assert sink.spec["class"] == "nodes:Sink" and sink.spec["status"] == paths.status_file(prefix, "sink")

        listing = await OPS["streams"].function(runtime)
        assert listing["streams"] == [{"name": "fake", "state": "attached", "nodes": 2, "project": str(project)}]

        with pytest.raises(ControlError) as refused:  # the name rule, as for any load
            await runtime.replace(project, GRAPH)
        assert refused.value.code == "name_loaded"

        source.end(1)  # a crash: the supervisor starts it again through the starter
        await until(lambda: starter.node("source") is not source and starter.node("source").spec, "a restart")
        assert stream.nodes["source"].restarts == 1
        assert (await OPS["streams"].function(runtime))["troubled"][0]["name"] == "source"

        newest = starter.node("source")
        stopped = await runtime.stop("fake")
        assert stopped == {"name": "fake", "state": "stopped", "kept": False}
        assert {"op": "stop"} in newest.messages and {"op": "stop"} in sink.messages
        assert all(node.state is NodeState.STOPPED for node in stream.nodes.values())
        assert not any(Path(paths.shm_namespace()).parent.glob(Path(prefix).name + "*"))
        await runtime.shutdown()
        assert starter.closed

    asyncio.run(scenario())
