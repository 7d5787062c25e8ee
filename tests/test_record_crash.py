"""Crash-safe without repair: a recording whose recorder or whose tatolabd is killed with kill -9 is
a whole MCAP file as it is (the mcap library's own make_reader reads it, no recover step), losing at
most its last second; after the runtime restarts, `tatolab record --list` says which was cut and where."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from mcap.reader import make_reader

from harness import Runtime, make_project, wait_for
from test_record import COUNTER

pytestmark = pytest.mark.slow

STREAM = '''
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter


@stream
def src(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Counter, name="counter")
'''


def _live(runtime: Runtime) -> dict:
    graph = json.loads(runtime.cli("graph", check=True).stdout)
    return graph["recordings"][0] if graph["recordings"] else {}


def _recorded_enough(runtime: Runtime) -> bool:
    row = _live(runtime)
    return row.get("bags", 0) > 400 and row.get("bytes", 0) > 5000  # chunks on disk, not only in the recorder


def _at_most_a_second_lost(before_kill: dict, in_file: int) -> None:
    """What the recorder had taken (its last report, twice a second) less what the file holds: at
    most its last second of bags (it closes a chunk every second)."""
    rate = before_kill["bags"] / max(0.5, before_kill["seconds"])
    assert before_kill["bags"] - in_file <= 1.5 * rate, (before_kill["bags"], in_file, rate)


def _as_it_is(path: Path) -> list[tuple[int, int]]:
    """Every message the mcap library reads, opening the file as it is (no NonSeekingReader, no recover)."""
    with open(path, "rb") as f:
        return [(m.log_time, json.loads(m.data)["n"]) for _, _, m in make_reader(f).iter_messages()]


def test_kill_9_of_tatolabd_or_of_the_recorder_leaves_a_file_the_mcap_library_opens_as_it_is(
        project_venv, runtime, tmp_path):
    project = make_project(tmp_path / "src", project_venv, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                            "nodes/counter.py": COUNTER})
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: runtime.cli("tap", "src/counter/count", "--count", "1").returncode == 0, timeout=60,
             what="the counter to write")

    # the recorder killed: the file is whole as it is, to within its last second
    by_recorder = tmp_path / "recorder.mcap"
    runtime.cli("record", "src/counter/count", "--out", str(by_recorder), "--detach", check=True)
    wait_for(lambda: _recorded_enough(runtime), timeout=60, what="400 bags recorded")
    before_kill = _live(runtime)
    os.kill(before_kill["pid"], signal.SIGKILL)
    wait_for(lambda: not _live(runtime), timeout=30, what="the runtime to see the recorder end")
    got = _as_it_is(by_recorder)
    ns = [n for _, n in got]
    assert len(ns) > 200 and ns == list(range(ns[0], ns[0] + len(ns)))
    _at_most_a_second_lost(before_kill, len(ns))
    listed = runtime.cli("record", "--list", check=True).stdout
    assert f"{by_recorder}: cut; readable as it is up to" in listed, listed

    # tatolabd killed: its recorder dies with it; the file is whole as it is
    by_runtime = tmp_path / "runtime.mcap"
    runtime.cli("record", "src/counter/count", "--out", str(by_runtime), "--detach", check=True)
    wait_for(lambda: _recorded_enough(runtime), timeout=60, what="400 bags recorded")
    before_kill = _live(runtime)
    runtime.stop(signal.SIGKILL)
    wait_for(lambda: runtime.leftover_processes() == [], what="the recorder and nodes to end with the runtime")
    got = _as_it_is(by_runtime)
    ns = [n for _, n in got]
    assert len(ns) > 200 and ns == list(range(ns[0], ns[0] + len(ns)))
    _at_most_a_second_lost(before_kill, len(ns))

    runtime.start()
    listed = runtime.cli("record", "--list", check=True).stdout
    assert "cut (an earlier run of the runtime)" in listed and str(by_runtime) in listed, listed
    line = next(line for line in listed.splitlines() if line.strip().startswith(f"{by_runtime}:"))
    # its stdin closes with the runtime, which ends it cleanly, and the reaper kills its group: on a busy
    # machine the clean end may come first, and then the file is finished and indexed after all
    assert ("readable as it is up to" in line and f"{len(ns)} messages" in line
            or line.endswith("finished and indexed after all")), line
