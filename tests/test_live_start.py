"""How add_node reads a node's start (live.started), with a stand-in for its supervised process."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from tatolab._runtime.lifecycle import live
from tatolab._runtime.rules.health import NodeState


@dataclass
class Node:
    pid: int | None = 4242
    state: NodeState = NodeState.RUNNING
    crash_streak: int = 0
    restarts: int = 0
    last_error: str | None = None
    ready: int = 0
    set_up: int = 0

    def ready_ns(self) -> int:
        return self.ready

    def set_up_ns(self) -> int:
        return self.set_up


def started(node: Node, has_inputs: bool, timeout: float = 0.05, since_ns: int = 0) -> live.Start:
    return asyncio.run(live.started(node, has_inputs, timeout, since_ns))  # type: ignore[arg-type]


def test_a_source_is_ready_at_its_first_call_and_a_processing_node_once_set_up():
    assert started(Node(ready=3_000_000, set_up=2_000_000), has_inputs=False) == live.Start(4242, "ready", 3.0)
    assert started(Node(set_up=2_000_000), has_inputs=True) == live.Start(4242, "waiting", 2.0)


def test_a_node_still_starting_when_the_wait_ends_says_so_and_one_set_up_waits():
    assert started(Node(), has_inputs=True) == live.Start(4242, "starting", None)
    assert started(Node(set_up=1_000_000), has_inputs=False).state == "waiting"  # set up, no call yet


def test_a_node_whose_process_ended_failed_with_its_logs_error():
    failed = started(Node(pid=None, crash_streak=1, last_error="node cam raised RuntimeError: no camera"), True)
    assert failed == live.Start(None, "failed", None, "node cam raised RuntimeError: no camera")
    assert started(Node(pid=None, state=NodeState.STOPPED), True).state == "stopped"


def test_the_wait_ends_as_soon_as_the_node_is_set_up():
    node = Node()

    async def later() -> live.Start:
        waiting = asyncio.ensure_future(live.started(node, True, 30.0, 0))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not waiting.done()
        node.set_up = time.monotonic_ns()
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(later()).state == "waiting"
