"""A recording the runtime died with is listed as cut, with its file, at the next start."""

from __future__ import annotations

import json
import os
import signal

import pytest

from harness import make_project, wait_for

from tatolab._runtime.stored.recording_marks import CutRecording, RecordingMarks


def test_a_mark_left_by_a_dead_runtime_is_listed_as_cut_with_its_file(tmp_path):
    path = tmp_path / "desk.mcap"
    path.write_bytes(b"\x89MCAP0\r\n" + b"x" * 100)  # cut: no footer
    marks = RecordingMarks(tmp_path)
    marks.add("rec-3", str(path), ["cam/camera/video"])
    marks.add("rec-4", str(tmp_path / "ended.mcap"), ["cam/camera/video"])
    marks.remove("rec-4")  # it ended while its runtime lived
    assert oct(os.stat(tmp_path / "recordings-in-progress.json").st_mode & 0o777) == "0o600"
    left = RecordingMarks(tmp_path).left_behind()  # the next runtime
    assert [m["id"] for m in left] == ["rec-3"]
    cut = CutRecording(left[0])
    assert cut.line() == (f"recording rec-3 of cam/camera/video to {path} was cut: the runtime ended while it "
                          "recorded (killed, or it crashed); the file is readable up to its last whole chunk")
    row = cut.row()
    assert (row["state"], row["reason"], row["path"], row["bytes"], row["indexed"]) == ("ended", "cut", str(path),
                                                                                       108, False)
    assert RecordingMarks(tmp_path).left_behind() == []  # said once


COUNTER = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=10)
class Counter:
    @node.output()
    def count(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        self.n += 1
        ctx.outputs.write("count", {"n": self.n})
"""


@pytest.mark.slow
def test_a_detached_recording_cut_by_kill_9_of_the_runtime_is_listed_after_its_restart(runtime, project_venv,
                                                                                          tmp_path):
    from harness import one_node_files

    project = make_project(tmp_path / "src", project_venv, one_node_files("src", "Counter", COUNTER))
    runtime.cli("run", "-d", cwd=project, check=True)
    out = tmp_path / "rec" / "counts.mcap"
    started = runtime.cli("record", "src/counter/count", "--out", str(out), "--detach", check=True).stdout
    rid = started.split()[1].rstrip(":")

    def recorded() -> int:
        rows = json.loads(runtime.cli("graph", check=True).stdout).get("recordings") or []
        return next((r["bags"] for r in rows if r["id"] == rid), 0)

    wait_for(lambda: recorded() > 20, timeout=60, what="bags recorded")
    assert runtime.process is not None
    runtime.process.send_signal(signal.SIGKILL)
    runtime.process.wait(timeout=30)
    runtime.start()  # the same state folder, socket and lock: the next runtime (the fixture stops it)
    listed = runtime.cli("record", "--list", check=True).stdout
    assert listed.startswith(f"{rid} ended: recorded "), listed
    assert str(out) in listed and "ended: cut" in listed
    log = (runtime.root / "state" / "tatolab" / "runtime.jsonl").read_text()
    assert f"recording {rid} of src/counter/count to {out} was cut: the runtime ended while it recorded" in log


def test_a_cut_split_recording_is_listed_with_each_numbered_file_and_where_a_reader_stops(tmp_path):
    from tatolab._cli.record import cut_lines
    from tatolab._recorder import formats
    from tatolab._recorder.file import McapFile

    out = tmp_path / "day.mcap"
    marks = RecordingMarks(tmp_path)
    marks.add("rec-7", str(out), ["src/counter/count"])
    files = []
    for number, n in ((1, 3), (2, 2)):
        f = McapFile(tmp_path / f"day-{number}.mcap", chunk_seconds=0)  # a chunk per message
        channel = f.channel("src/counter/count", "json", [{"n": 0}])
        for i in range(n):
            f.add(channel, 1_000_000_000 + i, 1_000_000_000 + i, formats.encode_json({"n": i}), i)
        os.close(f._out.fd)  # killed: never finished
        files.append(str(f.path))
    marks.files("rec-7", files)
    [left] = RecordingMarks(tmp_path).left_behind()
    row = CutRecording(left).row()
    assert [(c["path"], c["messages"], c["chunks"], c["indexed"]) for c in row["cut"]] == [
        (files[0], 3, 3, False), (files[1], 2, 2, False)]
    assert row["bags"] == 5 and row["earlier_run"] is True
    lines = cut_lines(row)
    assert lines[0].startswith(f"{files[0]}: cut; readable as it is up to ") and "(3 messages in 3 whole chunks" in lines[0]
