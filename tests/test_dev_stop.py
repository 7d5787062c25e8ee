"""`tatolab stop` landing while dev reloads a stream, so that the reload fails: dev ends, saying
why the stream ended, as it does when the stream is stopped between reloads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from tatolab._control.errors import ControlError, Reason
from tatolab._runtime.ops.dev import DevSession
from tatolab._runtime.lifecycle.streams import LoadedStream
from tatolab._runtime.rules.reload import same_shape

STOPPED = "stopped by `tatolab stop`"


class StopDuringReload:
    """The runtime's side of a reload that `tatolab stop` overtakes: the stream ends, then the
    replace (or the restart of its nodes) is refused, as the runtime refuses work on an ended stream."""

    def __init__(self, stream: LoadedStream) -> None:
        self.stream = stream

    def _stop(self) -> ControlError:
        self.stream.end_reason = Reason(STOPPED)
        self.stream.ended.set()
        return ControlError(f"stream {self.stream.name} has ended")

    def in_place(self, old, graph):  # the runtime's core decides this (tests/test_core.py)
        return same_shape(old.graph, graph)

    async def replace(self, project, graph, *, old, reason, env):
        raise self._stop()

    async def restart_nodes(self, stream, graph, saved):
        raise self._stop()


def _graph(node_class: str) -> dict:
    return {"stream": "cam", "nodes": [{"name": "probe", "class": node_class}], "links": []}


@pytest.mark.parametrize("changed", ["shape", "code"])
def test_a_stop_during_a_failing_reload_ends_dev_with_the_reason(tmp_path: Path, changed: str):
    async def reload() -> list[dict]:
        stream = LoadedStream("cam", tmp_path, _graph("nodes.probe:Probe"), "attached")
        session = DevSession(StopDuringReload(stream), SimpleNamespace(project=tmp_path), env=None)
        session.stream = stream
        # a new shape is swapped in by replacing the stream; the same shape restarts its nodes in place
        graph = _graph("nodes.probe:Other") if changed == "shape" else _graph("nodes.probe:Probe")
        await session._swap_in(graph, 0, reload=True)
        events = []
        while not session.out.empty():
            events.append(await session.out.get())
        return events

    events = asyncio.run(reload())
    assert [e["event"] for e in events] == ["ended"]
    assert events[0]["reason"] == STOPPED and events[0]["runtime_down"] is False
