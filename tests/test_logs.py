"""Stream logs: every kind of output becomes a record naming its node; rotation bounds the size;
`tatolab logs` reads, filters and follows."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness import Runtime, make_project, one_node_files, read_jsonl, wait_for

from tatolab._control.errors import ControlError
from tatolab._control.paths import log_files
from tatolab._runtime.stored.logread import LineBuffer, follow_lines, parse_since, read_lines, record_matches
from tatolab._records import make_record
from tatolab._runtime.stored.logs import RotatingJsonl, fit_line

CHATTY = """
import logging, os, sys
from tatolab.stream import node


@node(execution="continuous", interval_ms=200)
class Chatty:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        self.n += 1
        print(f"printed line {self.n}")
        ctx.log.info("ctx says hello", n=self.n)
        logging.getLogger("mylib").warning("logging says hello %d", self.n)
        os.write(2, f"native stderr {self.n}\\n".encode())
        if self.n == 2:
            raise ValueError("boom after two")
"""

FLOOD = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=1)
class Flood:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        self.n += 1
        print("x" * 300, self.n)
        if self.n % 50 == 0:
            print("y" * 100_000)  # one record bigger than a whole file
"""


RECORD_KEYS = {"ts_ns", "time", "level", "stream", "node", "message", "fields"}


@pytest.mark.slow
def test_prints_logs_native_output_and_the_crash_all_become_records_naming_the_node(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY))
    log = project / ".streamlib" / "logs" / "chatty.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: any("boom after two" in r["message"] for r in read_jsonl(log)), timeout=30,
                 what="the crash record")
        wait_for(lambda: any(r["message"] == "printed line 2" for r in read_jsonl(log)), what="the print")
        wait_for(lambda: any("restarting it" in r["message"] for r in read_jsonl(log)), what="the restart record")
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=20)
    records = read_jsonl(log)
    assert all(set(r) == RECORD_KEYS for r in records)
    assert all(r["stream"] == "chatty" for r in records)
    mine = [r for r in records if r["node"] == "chatty"]
    by_message: dict = {}
    for r in mine:
        by_message.setdefault(r["message"], r)  # the first of each
    assert by_message["printed line 1"]["fields"] == {"source": "stdout"}
    assert by_message["ctx says hello"]["fields"] == {"n": 1}
    assert by_message["logging says hello 1"]["level"] == "warning"
    assert by_message["logging says hello 1"]["fields"]["logger"] == "mylib"
    assert by_message["native stderr 1"]["fields"] == {"source": "stderr"}
    crash = next(r for r in mine if "boom after two" in r["message"])
    assert crash["level"] == "error" and crash["message"] == "node chatty raised ValueError: boom after two"
    assert "Traceback" in crash["fields"]["traceback"] and "ValueError: boom after two" in crash["fields"]["traceback"]
    # What the node printed before it raised comes before the crash, every time it ran.
    messages = [r["message"] for r in mine]
    first_crash = messages.index(crash["message"])
    assert "printed line 2" in messages[:first_crash], messages
    assert any("restarting it" in r["message"] for r in mine)
    stamps = [r["ts_ns"] for r in records]
    assert all(isinstance(ts, int) and ts > 0 for ts in stamps)


INTERLEAVED = """
import logging, sys, warnings
from tatolab.stream import node


@node(execution="continuous", interval_ms=10)
class Interleaved:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        for i in range(40):
            print(f"print {i}")
            ctx.log.info(f"log {i}")
            sys.stderr.write(f"stderr {i}\\n")
            logging.getLogger("lib").warning(f"logging {i}")
        print("last words")
        raise RuntimeError("after the last words")
"""


@pytest.mark.slow
def test_a_nodes_prints_and_records_keep_the_order_they_were_written_in(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "interleaved", project_venv, one_node_files("interleaved", "Interleaved", INTERLEAVED))
    log = project / ".streamlib" / "logs" / "interleaved.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: any("after the last words" in r["message"] for r in read_jsonl(log)), timeout=30,
                 what="the crash record")
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=20)
    messages = [r["message"] for r in read_jsonl(log) if r["node"] == "interleaved"]
    first_run = messages[: messages.index("node interleaved raised RuntimeError: after the last words") + 1]
    expected = [m for i in range(40) for m in (f"print {i}", f"log {i}", f"stderr {i}", f"logging {i}")]
    assert first_run == [*expected, "last words", "node interleaved raised RuntimeError: after the last words"]


@pytest.mark.slow
def test_logs_reads_filters_and_shows_json(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY))
    log = project / ".streamlib" / "logs" / "chatty.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: any("boom after two" in r["message"] for r in read_jsonl(log)), timeout=30, what="the crash")
        human = runtime.cli("logs", "--stream", "chatty", check=True).stdout
        errors = runtime.cli("logs", "--stream", "chatty", "--level", "error", "--json", check=True).stdout
        recent = runtime.cli("logs", "--stream", "chatty", "--since", "10m", "--node", "chatty", check=True).stdout
        future = runtime.cli("logs", "--stream", "chatty", "--since",
                             (datetime.now() + timedelta(hours=1)).isoformat(), check=True).stdout
        bad = runtime.cli("logs", "--stream", "chatty", "--since", "yesterday")
        unknown = runtime.cli("logs", "--stream", "nope")
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=20)
    assert "chatty/chatty: printed line 1" in human and "ctx says hello n=1" in human
    rows = [json.loads(line) for line in errors.splitlines()]
    assert rows and all(r["level"] in ("error", "critical") for r in rows)
    assert "printed line 1" in recent
    assert future == ""
    assert bad.returncode == 1 and "neither a duration" in bad.stderr
    assert unknown.returncode == 1 and "no stream named nope" in unknown.stderr


def _reader(pipe, into: queue.Queue) -> None:
    for line in pipe:
        into.put((datetime.now(timezone.utc), line))


@pytest.mark.slow
def test_logs_follow_shows_a_record_within_a_second(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "chatty", project_venv, one_node_files("chatty", "Chatty", CHATTY))
    run = runtime.popen_cli("run", cwd=project)
    follow = None
    try:
        wait_for(lambda: "chatty" in runtime.stream_names(), timeout=30, what="the stream")
        follow = runtime.popen_cli("logs", "--stream", "chatty", "-f", "--json", "--tail", "0")
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(follow.stdout, lines), daemon=True).start()
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 9 and time.monotonic() < deadline:
            arrived, line = lines.get(timeout=30)
            record = json.loads(line)
            seen.append((arrived - datetime.fromisoformat(record["time"])).total_seconds())
    finally:
        if follow is not None:
            follow.kill()
            follow.communicate(timeout=10)
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=20)
    assert len(seen) == 9
    # From the node's write to the follower's line: typically well under a second (-f polls every
    # 0.1 s). The median, not the maximum: on a busy machine one record may wait for a CPU, while a
    # follower that polled too slowly, or only printed at its end, shows it in most records.
    assert sorted(seen)[len(seen) // 2] < 1.0, seen


@pytest.fixture
def small_log_runtime(tmp_path: Path):
    rt = Runtime(tmp_path / "rt")
    rt.env["TATOLAB_LOG_MAX_BYTES"] = "20000"
    rt.start()
    yield rt
    output = rt.stop()
    assert rt.leftover_processes() == [], f"processes left behind: {rt.leftover_processes()}\n{output}"
    assert rt.shm_files() == []


@pytest.mark.slow
def test_a_log_file_never_grows_past_its_limit(small_log_runtime, project_venv, tmp_path):
    runtime = small_log_runtime
    project = make_project(tmp_path / "flood", project_venv, one_node_files("flood", "Flood", FLOOD))
    log = project / ".streamlib" / "logs" / "flood.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    sizes = []

    def rotated_twice() -> bool:
        sizes.extend(p.stat().st_size for p in log_files(log) if p.exists())
        return log.with_name("flood.jsonl.2").exists() and log.with_name("flood.jsonl.1").stat().st_mtime > 0

    try:
        wait_for(rotated_twice, timeout=60, what="the log to rotate twice")
        wait_for(lambda: any("truncated_from_bytes" in line for line in log_files_text(log)), timeout=30,
                 what="an oversized record, cut")
        rotated_twice()
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=20)
    sizes.extend(p.stat().st_size for p in log_files(log))
    assert max(sizes) <= 20000, max(sizes)
    assert not log.with_name("flood.jsonl.3").exists()
    for path in log_files(log):
        for line in path.read_bytes().splitlines():
            json.loads(line)  # every line is a whole record


def log_files_text(log: Path) -> list[str]:
    return [line for p in log_files(log) for line in p.read_text(errors="replace").splitlines()]


# --- the parts, without a runtime ------------------------------------------------------------

def test_readers_skip_an_unterminated_last_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"message": "whole"}\n{"message": "cut sh')
    assert read_lines(path) == [b'{"message": "whole"}']
    buffer = LineBuffer()
    assert buffer.feed(b'{"a": 1}\n{"b"') == [b'{"a": 1}']
    assert buffer.feed(b': 2}\n') == [b'{"b": 2}']


def test_follow_continues_across_rotations(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = RotatingJsonl(path, max_bytes=4096)
    lines: queue.Queue = queue.Queue()
    start = open(path, "rb")

    async def follow() -> None:
        async for line in follow_lines(path, start, poll_s=0.01):
            lines.put(line)

    threading.Thread(target=asyncio.run, args=(follow(),), daemon=True).start()
    for n in range(300):
        writer.write(json.dumps({"message": f"record {n}", "pad": "p" * 80}))
        if n % 40 == 0:
            time.sleep(0.05)  # let the follower see some rotations one at a time
    writer.close()
    got = [json.loads(lines.get(timeout=10))["message"] for _ in range(300)]
    assert got == [f"record {n}" for n in range(300)]


def test_rotation_keeps_three_files_each_under_the_limit(tmp_path):
    path = tmp_path / "s.jsonl"
    writer = RotatingJsonl(path, max_bytes=4096)
    for n in range(500):
        writer.write(json.dumps({"message": "m" * (n % 7 * 100)}))
    writer.write(json.dumps(make_record("z" * 50_000)))
    writer.close()
    files = log_files(path)
    assert len(files) == 3 and all(p.stat().st_size <= 4096 for p in files)
    assert not path.with_name("s.jsonl.3").exists()


def test_an_oversized_record_is_cut_to_fit_and_says_so():
    line = (json.dumps(make_record("x" * 10_000, stream="s", node="n")) + "\n").encode()
    cut = fit_line(line, 4096)
    record = json.loads(cut)
    assert len(cut) <= 4096 and cut.endswith(b"\n")
    assert record["node"] == "n" and record["fields"] == {"truncated_from_bytes": len(line)}
    assert fit_line(b'{"a": 1}\n', 4096) == b'{"a": 1}\n'


def test_since_takes_durations_and_iso_times():
    now = datetime(2025, 5, 1, 12, 0, tzinfo=timezone.utc)
    assert parse_since("10m", now) == now - timedelta(minutes=10)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("1.5s", now) == now - timedelta(seconds=1.5)
    assert parse_since("2025-05-01T11:00:00+00:00", now) == now - timedelta(hours=1)
    assert parse_since("2025-05-01T11:00").tzinfo is not None  # local time
    with pytest.raises(ControlError, match="neither a duration"):
        parse_since("last week")


def test_record_filters():
    record = make_record("hi", level="warning", stream="s", node="a")
    assert record_matches(record, node="a", levels={"warning", "error"}, since=None)
    assert not record_matches(record, node="b", levels=None, since=None)
    assert not record_matches(record, node=None, levels={"error"}, since=None)
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    assert not record_matches(record, node=None, levels=None, since=later)


def test_runtime_log_limit_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TATOLAB_LOG_MAX_BYTES", "5000")
    writer = RotatingJsonl(tmp_path / "r.jsonl")
    assert writer.max_bytes == 5000
    writer.close()
    assert os.path.exists(tmp_path / "r.jsonl")
