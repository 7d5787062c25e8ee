"""Updates under a running runtime: a new SDK in a project's .venv is picked up by the next node
start, and no node already running dies for it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from harness import make_project, wait_for
from test_warm import node_pids_by_name

IDLE = """
    from tatolab.stream import node


    @node(execution="manual")
    class Idle:
        def process(self, ctx) -> None: ...
"""


def idle_project(path: Path, venv: Path, name: str, nodes: int) -> Path:
    adds = "".join(f"    stream_builder.add(Idle, name='idle{i}')\n" for i in range(nodes))
    stream = ("from tatolab.stream import StreamBuilder, stream\nfrom idle import Idle\n\n\n"
              f"@stream\ndef {name}(stream_builder: StreamBuilder) -> None:\n{adds}")
    return make_project(path, venv, {"stream.py": stream, "idle.py": IDLE})


def running_pids(runtime, stream: str, count: int) -> dict[str, int]:
    def all_running() -> dict[str, int] | None:
        pids = node_pids_by_name(runtime, stream)
        return pids if len(pids) == count and all(pids.values()) else None  # type: ignore[return-value]
    return wait_for(all_running, timeout=30, what=f"the {count} nodes of {stream} running")  # type: ignore[return-value]


def test_a_new_sdk_in_the_venv_leaves_running_nodes_of_other_streams_alone(runtime, project_venv, tmp_path):
    first = idle_project(tmp_path / "first", project_venv, "first", 2)
    second = idle_project(tmp_path / "second", project_venv, "second", 1)
    runtime.cli("run", "-d", cwd=first, check=True)
    before = running_pids(runtime, "first", 2)
    (old_warm,) = runtime.warm_pids()

    sdk = next(project_venv.glob("lib/python*/site-packages/tatolab/stream.py"))
    os.utime(sdk)  # what reinstalling tatolab or `tatolab sdk` does to the interpreter's files
    runtime.cli("run", "-d", cwd=second, check=True)
    (new_pid,) = running_pids(runtime, "second", 1).values()
    runtime.cli("node", "add", "second", "idle9", "idle:Idle", cwd=second, check=True)
    running_pids(runtime, "second", 2)

    assert running_pids(runtime, "first", 2) == before  # the same processes, never restarted
    assert all(psutil.Process(pid).is_running() for pid in before.values())
    assert psutil.Process(new_pid).ppid() != old_warm  # the new node came from a fresh interpreter
    log = [json.loads(line) for line in (runtime.root / "state" / "tatolab" / "runtime.jsonl").read_text().splitlines()]
    picked = [r["message"] for r in log if "was picked up" in r["message"]]
    assert len(picked) == 1 and f"(pid {old_warm}) ends once the 2 nodes it started end" in picked[0], picked

    runtime.cli("stop", "first", check=True)  # its last children gone, the old interpreter retires
    wait_for(lambda: not psutil.pid_exists(old_warm) or psutil.Process(old_warm).status() == psutil.STATUS_ZOMBIE,
             timeout=30, what="the replaced warm interpreter to end with its last node")
    assert old_warm not in runtime.warm_pids()
