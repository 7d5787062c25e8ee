"""Links against another user and against faults (issue 9: findings 1, 9, 10, 11, 12 and 14).

Another user must not plant, read or inject into a ring; a damaged ring never makes a reader
(or the runtime, through `tap`) spin; a bag that does not decode is skipped and counted; an
unread ordered input does not spin its node; counters say what the node got; a grown ring
gives its memory back.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import stat
import struct
import subprocess
import threading
import uuid
from typing import Any, Callable

import psutil
import pytest

from harness import BIN, Runtime, make_project, read_jsonl, wait_for
from other_user import OtherUser
from nodes_fixture import COUNTER, SINK
from tatolab._links import ring, shm
from tatolab._links.ring import BagTooLarge, RingReader, RingWriter, create_ring, read_counters, reap

WRITE_SEQ_BYTE = 5 * 8  # the header's write counter (ring/layout.py's docstring)


# --- another Unix user (the `other_user` fixture: tests/other_user.py) ----------------------------

def as_user(user: OtherUser, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``action`` in a child process that has become ``user``; its result, through a pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            result = action()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"child error": repr(exc)}
        try:
            os.write(write_fd, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def attempt(fn: Callable[[], object]) -> str:
    try:
        fn()
        return "done"
    except OSError as exc:
        return type(exc).__name__


def plant_and_peek(base: str) -> Callable[[], dict[str, str]]:
    """What a hostile user tries on a ring: plant the next generation, read the current one, list the folder."""

    def run() -> dict[str, str]:
        return {
            "plant": attempt(lambda: os.close(os.open(base + ".1", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))),
            "read": attempt(lambda: open(base + ".0", "rb").read(64)),
            "list": attempt(lambda: os.listdir(os.path.dirname(base))),
        }

    return run


def remove_planted(path: str, user: OtherUser) -> None:
    try:
        if os.lstat(path).st_uid == user.uid:
            os.unlink(path)
    except FileNotFoundError:
        pass


@pytest.fixture
def base():
    b = f"{shm.private_folder()}/test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield b
    reap(b)


def stop_attached(run: subprocess.Popen) -> tuple[str, str]:
    run.send_signal(2)
    return run.communicate(timeout=30)


def graph(runtime: Runtime, stream: str) -> dict[str, Any] | None:
    """The stream's entry in `tatolab graph`; None while the stream is not loaded yet."""
    result = runtime.cli("graph", "--stream", stream, timeout=20)
    if result.returncode != 0:
        assert f"no stream named {stream}" in result.stderr, result.stderr
        return None
    return json.loads(result.stdout)["streams"][0]


def link(g: dict[str, Any], to_node: str, to_port: str | None = None) -> dict[str, Any]:
    return next(l for l in g["links"] if l["to"]["node"] == to_node and (to_port is None or l["to"]["port"] == to_port))


def node(g: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in g["nodes"] if n["name"] == name)


def stream_files(stream_py: str, **extra: str) -> dict[str, str]:
    return {"stream.py": stream_py, "nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/sinks.py": SINK, **extra}


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def cpu_over(pid: int, seconds: float) -> float:
    """CPU seconds process ``pid`` used over ``seconds`` of wall time (a measurement, not a wait for anything)."""
    start = cpu_seconds(pid)
    threading.Event().wait(seconds)
    return cpu_seconds(pid) - start


def edit_write_counter(path: str, value: int) -> None:
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 64) as mm:
        struct.pack_into("<Q", mm, WRITE_SEQ_BYTE, value)


PIPELINE = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink


@stream
def NAME(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter, config={"limit": LIMIT})
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
"""


# --- 1: planted ring generations ---------------------------------------------------------------

def test_another_user_cannot_plant_read_or_list_the_rings_of_a_running_stream(runtime, project_venv, tmp_path, other_user):
    project = make_project(tmp_path / "planted", project_venv,
                           stream_files(PIPELINE.replace("NAME", "planted").replace("LIMIT", "-1")))
    run = runtime.popen_cli("run", cwd=project)
    out = project / "out.jsonl"
    try:
        wait_for(lambda: len(read_jsonl(out)) >= 10, timeout=30, what="bags at the sink")
        ring0 = next(f for f in runtime.shm_files() if f.endswith("+counter+counts.0"))
        base = ring0[:-2]
        try:
            tried = as_user(other_user, plant_and_peek(base))
        finally:
            remove_planted(base + ".1", other_user)
        folder = os.lstat(os.path.dirname(base))
        mode = stat.S_IMODE(os.stat(ring0).st_mode)
        before = len(read_jsonl(out))
        wait_for(lambda: len(read_jsonl(out)) >= before + 10, timeout=30, what="bags still flowing")
    finally:
        stop_attached(run)
    assert tried == {"plant": "PermissionError", "read": "PermissionError", "list": "PermissionError"}
    assert folder.st_uid == os.geteuid() and stat.S_ISDIR(folder.st_mode) and stat.S_IMODE(folder.st_mode) == 0o700
    assert mode == 0o600
    rows = read_jsonl(out)
    assert [row["n"] for row in rows] == list(range(len(rows))), "the sink got bags its source did not send"


@pytest.mark.parametrize("planted", ["file", "symlink"])
def test_a_ring_generation_that_is_not_the_users_own_file_is_refused(base, other_user, planted):
    create_ring(base, slot_size=256, slot_count=4)
    writer = RingWriter(base)
    writer.write(b"mine")
    gen1 = base + ".1"
    if planted == "file":  # as if another user had made it, with a valid header
        shutil.copyfile(base + ".0", gen1)
        os.chown(gen1, other_user.uid, other_user.gid)
        os.chmod(gen1, 0o666)
        expected = rf"{gen1} is a file owned by {other_user.name} \(uid {other_user.uid}\), not by you"
    else:
        os.symlink(base + ".0", gen1)
        expected = rf"{gen1} is a symbolic link to {base}.0"
    try:
        with pytest.raises(ring.RingError, match=expected):
            RingReader(base, 0, "ordered")
        with pytest.raises(ring.RingError, match=expected):
            RingWriter(base)
    finally:
        writer.close()


@pytest.mark.parametrize("squat", ["folder", "symlink"])
def test_a_shared_memory_folder_another_user_made_first_is_refused_naming_the_owner(other_user, squat):
    path = f"{shm.SHM_ROOT}/tatolab-test-{uuid.uuid4().hex[:8]}"
    theirs = path + "-theirs"

    def make() -> dict[str, str]:
        os.mkdir(theirs, 0o777)
        os.chmod(theirs, 0o777)
        if squat == "folder":
            os.rename(theirs, path)
        else:
            os.symlink(theirs, path)
        return {}

    try:
        assert as_user(other_user, make) == {}
        owner = rf"{other_user.name} \(uid {other_user.uid}\)"
        if squat == "folder":
            expected = rf"{path} is a folder owned by {owner}, not by you"
        else:
            expected = rf"{path} is a symbolic link .*owned by {owner}"
        with pytest.raises(ring.RingError, match=expected):
            shm.private_folder(path)
        with pytest.raises(ring.RingError, match=expected):
            create_ring(path + "/x")
        assert os.listdir(theirs if squat == "symlink" else path) == [], "a file was made in the other user's folder"
    finally:
        for p in (path, theirs):
            if os.path.islink(p):
                os.unlink(p)
            elif os.path.isdir(p):
                shutil.rmtree(p)


# a runtime whose shared-memory folder another user made first starts at a private name: test_places.py


# --- 9: a damaged ring never spins ---------------------------------------------------------------

@pytest.mark.parametrize("profile", ["newest", "ordered"])
def test_a_reader_gives_up_on_a_ring_whose_write_counter_was_edited(base, profile):
    create_ring(base, slot_size=256, slot_count=8)
    writer = RingWriter(base)
    for seq in range(1, 6):
        writer.write(b"bag %d" % seq)
    reader = RingReader(base, 0, profile)
    edit_write_counter(base + ".0", 1_000_000_000)
    result: dict[str, Any] = {"bags": 0}

    def read_until_error() -> None:
        try:
            while True:
                got = reader.read_many()
                result["bags"] += len(got)
                if not got:
                    result["error"] = "read_many returned nothing on a ring that says it has bags"
                    return
        except ring.RingError as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=read_until_error, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the reader is still trying: it spins on the damaged ring"
    assert base in result["error"] and "makes no sense" in result["error"] and "gives up" in result["error"]
    assert result["bags"] == (5 if profile == "ordered" else 0)  # what was whole was handed over
    reader.close()
    writer.close()


def test_a_damaged_ring_stops_its_readers_with_an_error_and_never_freezes_the_runtime(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "damaged", project_venv,
                           stream_files(PIPELINE.replace("NAME", "damaged").replace("LIMIT", "20")))
    run = runtime.popen_cli("run", cwd=project)
    tap = None
    try:
        wait_for(lambda: len(read_jsonl(project / "out.jsonl")) >= 20, timeout=30, what="20 bags at the sink")
        tap = runtime.popen_cli("tap", "damaged/counter/counts", "--timeout", "60")
        wait_for(lambda: (g := graph(runtime, "damaged")) and node(g, "counter")["outputs"][0]["taps"], what="the tap to open")
        ring0 = next(f for f in runtime.shm_files() if f.endswith("+counter+counts.0"))
        edit_write_counter(ring0, 1_000_000_000)
        _, tap_err = tap.communicate(timeout=30)
        # the runtime still answers, and the sink lives on without spinning
        g = graph(runtime, "damaged")
        sink = node(g, "orderedsink")
        log = project / ".streamlib" / "logs" / "damaged.jsonl"
        error = wait_for(
            lambda: next((r for r in read_jsonl(log) if r.get("level") == "error" and "makes no sense" in r["message"]), None),
            what="the sink's error about the damaged link",
        )
        busy = cpu_over(sink["pid"], 1.0)
        assert runtime.cli("streams", timeout=20).returncode == 0
        # graph no longer says the link is wired: it is broken, with the reader's reason
        broken = wait_for(lambda: next((link for link in graph(runtime, "damaged")["links"]
                                        if link["to"]["node"] == "orderedsink" and link["state"] == "broken"), None),
                          what="the damaged link shown as broken in graph")
    finally:
        if tap is not None and tap.poll() is None:
            tap.kill()
            tap.communicate()
        stop_attached(run)
    assert tap.returncode == 1
    assert "damaged/counter/counts" in tap_err and "makes no sense" in tap_err
    assert sink["state"] == "running" and sink["restarts"] == 0
    assert "stream damaged, node orderedsink, input rows, from counter/counts" in error["message"]
    assert busy < 0.3, f"the sink used {busy:.2f} s of CPU in 1 s after its link was damaged"
    assert broken["reason"] == error["message"] and "makes no sense" in broken["reason"]


# --- 10: a bag that does not decode --------------------------------------------------------------

BAD_SOURCE = """
import msgspec
from tatolab.stream import node


@node(execution="continuous", interval_ms=20)
class BadSource:
    @node.output()
    def rows(self) -> dict: ...

    sent = False

    def process(self, ctx) -> None:
        if self.sent:
            return
        # past the codec, as a broken or hostile writer would (the big one first: it grows the
        # ring, and a reader that attaches after that starts in the grown ring)
        writer = ctx.outputs._ports["rows"].writer
        writer.write(b"\\x81\\xa1a" + b"\\x91" * 200_000 + b"\\x01")
        writer.write(b"\\xc1 not msgpack")
        writer.write(msgspec.msgpack.encode(5))
        ctx.outputs.write("rows", {"n": 0})
        self.sent = True
"""


def test_a_bag_that_does_not_decode_is_skipped_counted_and_logged_and_the_node_goes_on(runtime, project_venv, tmp_path):
    stream_py = """
        from tatolab.stream import StreamBuilder, stream
        from nodes.bad import BadSource
        from nodes.sinks import OrderedSink


        @stream
        def badbags(stream_builder: StreamBuilder) -> None:
            source = stream_builder.add(BadSource)
            sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
            stream_builder.connect(source.output("rows"), sink.input("rows"))
    """
    project = make_project(tmp_path / "badbags", project_venv, stream_files(stream_py, **{"nodes/bad.py": BAD_SOURCE}))
    run = runtime.popen_cli("run", cwd=project)
    log = project / ".streamlib" / "logs" / "badbags.jsonl"
    try:
        wait_for(lambda: read_jsonl(project / "out.jsonl"), timeout=30, what="the good bag at the sink")
        g = wait_for(lambda: (g := graph(runtime, "badbags")) and link(g, "orderedsink")["counters"]["bad"] == 3 and g,
                     what="3 bad bags counted on the link")
        warnings = wait_for(
            lambda: [r for r in read_jsonl(log) if "did not decode" in r.get("message", "")] or None,
            what="the log to say a bag was skipped",
        )
    finally:
        stop_attached(run)
    assert [row["n"] for row in read_jsonl(project / "out.jsonl")] == [0]
    counters = link(g, "orderedsink")["counters"]
    assert (counters["written"], counters["read"], counters["dropped"], counters["bad"], counters["behind"]) == (4, 1, 0, 3, 0)
    sink = node(g, "orderedsink")
    assert sink["restarts"] == 0 and sink["last_error"] is None and sink["state"] == "running"
    assert sink["inputs"][0]["bad"] == 3
    assert len(warnings) == 3
    assert all("stream badbags, node orderedsink, input rows, from badsource/rows" in w["message"] for w in warnings)
    assert {w["fields"]["bad"] for w in warnings} == {1}


# --- 11: an unread ordered input -----------------------------------------------------------------

PICKY = """
from tatolab.stream import node


@node
class Picky:
    @node.input(delivery_profile="ordered")
    def a(self) -> dict: ...

    @node.input(delivery_profile="newest")
    def b(self) -> dict: ...

    calls = 0

    def process(self, ctx) -> None:
        ctx.inputs.read("b")  # never reads a
        Picky.calls += 1
        with open("calls.txt", "w") as f:
            f.write(str(Picky.calls))
"""


def test_an_ordered_input_left_unread_does_not_spin_its_node(runtime, project_venv, tmp_path):
    stream_py = """
        from tatolab.stream import StreamBuilder, stream
        from nodes.counter import Counter
        from nodes.picky import Picky


        @stream
        def picky(stream_builder: StreamBuilder) -> None:
            many = stream_builder.add(Counter, name="many", config={"limit": 200})
            none = stream_builder.add(Counter, name="none", config={"limit": 0})
            picky = stream_builder.add(Picky)
            stream_builder.connect(many.output("counts"), picky.input("a"))
            stream_builder.connect(none.output("counts"), picky.input("b"))
    """
    project = make_project(tmp_path / "picky", project_venv, stream_files(stream_py, **{"nodes/picky.py": PICKY}))
    run = runtime.popen_cli("run", cwd=project)
    try:
        g = wait_for(lambda: (g := graph(runtime, "picky")) and link(g, "picky", "a")["counters"]["written"] == 200 and g,
                     timeout=30, what="the 200 bags written on a")
        busy = cpu_over(node(g, "picky")["pid"], 1.0)
        calls = int((project / "calls.txt").read_text())
        counters = link(graph(runtime, "picky"), "picky", "a")["counters"]
    finally:
        stop_attached(run)
    assert busy < 0.3, f"the node used {busy:.2f} s of CPU in 1 s waiting with an unread ordered bag"
    assert calls == 1, "process() was called again without anything new to deliver"
    assert counters["dropped"] == 0


# --- 12: newest counters say what the node got ---------------------------------------------------

BUSY_THEN_READ = """
import json, time
from tatolab.stream import node


@node
class BusyThenRead:
    @node.input(delivery_profile="newest")
    def rows(self) -> dict: ...

    def process(self, ctx) -> None:
        time.sleep(0.03)  # work first, then read: newer bags arrive meanwhile
        bag = ctx.inputs.read("rows")
        if bag is not None:
            with open("got.jsonl", "a") as f:
                f.write(json.dumps(bag) + "\\n")
"""


def test_newest_counters_equal_what_the_node_got_and_its_drops_show_in_its_own_entry(runtime, project_venv, tmp_path):
    stream_py = """
        from tatolab.stream import StreamBuilder, stream
        from nodes.counter import Counter
        from nodes.busy import BusyThenRead


        @stream
        def slow(stream_builder: StreamBuilder) -> None:
            counter = stream_builder.add(Counter, config={"limit": 100})
            sink = stream_builder.add(BusyThenRead)
            stream_builder.connect(counter.output("counts"), sink.input("rows"))
    """
    project = make_project(tmp_path / "slow", project_venv, stream_files(stream_py, **{"nodes/busy.py": BUSY_THEN_READ}))
    run = runtime.popen_cli("run", cwd=project)
    got = project / "got.jsonl"
    try:
        wait_for(lambda: (rows := read_jsonl(got)) and rows[-1]["n"] == 99, timeout=30, what="the last bag at the sink")
        g = wait_for(
            lambda: (g := graph(runtime, "slow")) and link(g, "busythenread")["counters"]["behind"] == 0 and g,
            what="the reader to have caught up",
        )
        rows = read_jsonl(got)
    finally:
        stop_attached(run)
    counters = link(g, "busythenread")["counters"]
    assert counters["written"] == 100
    assert counters["read"] == len(rows), "read counts bags the node never got"
    assert counters["written"] == counters["read"] + counters["dropped"] + counters["behind"]
    assert counters["dropped"] > 0
    port = node(g, "busythenread")["inputs"][0]
    assert (port["read"], port["dropped"]) == (counters["read"], counters["dropped"])


# --- 14: huge bags -------------------------------------------------------------------------------

def _ring_bytes(base: str) -> int:
    folder, name = os.path.split(base)
    return sum(os.stat(os.path.join(folder, e)).st_size for e in os.listdir(folder) if e.startswith(name + "."))


def test_a_grown_ring_returns_to_its_normal_size_when_big_bags_stop(base):
    create_ring(base, slot_size=1024, slot_count=16)
    normal = _ring_bytes(base)
    writer = RingWriter(base)
    reader = RingReader(base, 0, "ordered")
    writer.write(b"x" * (3 << 20))
    assert _ring_bytes(base) > 4 * (3 << 20)  # grown: 4 slots of 3 MiB to start with (ring/writer.py)
    got = [len(p) for p, _ in reader.read_many()]
    for seq in range(200):
        writer.write(b"small %d" % seq)
        got += [len(p) for p, _ in reader.read_many()]
    assert _ring_bytes(base) == normal
    assert read_counters(base)["slot_size"] == 1024 and read_counters(base)["slot_count"] == 16
    assert got == [3 << 20] + [len(b"small %d" % seq) for seq in range(200)]
    assert reader.dropped == 0
    reader.close()
    writer.close()


def test_a_grown_ring_that_falls_idle_returns_to_its_normal_size(base, monkeypatch):
    create_ring(base, slot_size=1024, slot_count=16)
    normal = _ring_bytes(base)
    writer = RingWriter(base)
    reader = RingReader(base, 0, "ordered")
    writer.write(b"x" * (3 << 20))
    assert not writer.relax()  # not yet: big bags may still be coming
    monkeypatch.setattr(ring.writer, "_SHRINK_AFTER_S", 0.0)
    monkeypatch.setattr(ring.writer, "_SHRINK_CHECK_NS", 0)
    # nor while a reader still maps the generation before the big bag's: it would miss it
    assert not writer.relax() and writer.grown
    assert [len(p) for p, _ in reader.read_many()] == [3 << 20]
    assert writer.relax() and not writer.grown
    assert _ring_bytes(base) == normal
    writer.write(b"after")
    assert [p for p, _ in reader.read_many()] == [b"after"] and reader.dropped == 0
    reader.close()
    writer.close()


BIG_ONCE = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=20)
class BigOnce:
    @node.output()
    def frames(self) -> dict: ...

    sent = False

    def process(self, ctx) -> None:
        if not self.sent:
            ctx.outputs.write("frames", {"pixels": b"x" * (3 << 20)})
            self.sent = True
"""


def test_a_ring_grown_by_one_big_bag_shrinks_back_while_the_stream_runs_on(runtime, project_venv, tmp_path):
    stream_py = """
        from tatolab.stream import StreamBuilder, stream
        from nodes.big import BigOnce
        from nodes.sinks import OrderedSink


        @stream
        def big(stream_builder: StreamBuilder) -> None:
            source = stream_builder.add(BigOnce)
            sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
            stream_builder.connect(source.output("frames"), sink.input("rows"))
    """
    project = make_project(tmp_path / "big", project_venv, stream_files(stream_py, **{"nodes/big.py": BIG_ONCE}))
    run = runtime.popen_cli("run", cwd=project)

    def ring_bytes() -> int | None:
        files = [f for f in runtime.shm_files() if "+bigonce+frames." in f]
        try:
            return sum(os.stat(f).st_size for f in files) if files else None
        except FileNotFoundError:  # the writer moved on and unlinked a generation since the listing: look again
            return None

    try:
        wait_for(lambda: (g := graph(runtime, "big")) and link(g, "orderedsink")["counters"]["read"] == 1,
                 timeout=30, what="the big bag at the sink")
        normal = ring.layout._file_size(16 * 1024, 128)
        wait_for(lambda: ring_bytes() == normal, what="the ring back at its normal size")
        g = graph(runtime, "big")
    finally:
        stop_attached(run)
    assert node(g, "bigonce")["state"] == "running" and node(g, "orderedsink")["state"] == "running"
    assert link(g, "orderedsink")["counters"]["dropped"] == 0


def test_a_rings_memory_is_capped_by_TATOLAB_LINK_MEMORY_MB(base, monkeypatch):
    monkeypatch.setenv("TATOLAB_LINK_MEMORY_MB", "8")
    create_ring(base, slot_size=1024, slot_count=16)  # the runtime's setting goes into the ring
    monkeypatch.delenv("TATOLAB_LINK_MEMORY_MB")  # the writer (a node) never sees TATOLAB_* variables
    writer = RingWriter(base)
    writer.write(b"x" * (3 << 20))
    assert _ring_bytes(base) <= 8 << 20
    with pytest.raises(BagTooLarge, match=r"5,242,880 bytes .* TATOLAB_LINK_MEMORY_MB=8"):
        writer.write(b"x" * (5 << 20))
    assert writer.write(b"still fine") == 2
    writer.close()
    monkeypatch.setenv("TATOLAB_LINK_MEMORY_MB", "lots")
    with pytest.raises(ValueError, match=r"TATOLAB_LINK_MEMORY_MB='lots' is not allowed: give a whole number of MiB"):
        create_ring(base + "-other")


@pytest.mark.slow
def test_the_runtime_refuses_to_start_with_a_bad_TATOLAB_LINK_MEMORY_MB(tmp_path):
    rt = Runtime(tmp_path / "rt")
    rt.env["TATOLAB_LINK_MEMORY_MB"] = "1"
    result = subprocess.run([str(BIN / "tatolabd")], env=rt.env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "TATOLAB_LINK_MEMORY_MB='1' is not allowed: give a whole number of MiB from 4 to" in result.stderr
    assert "Traceback" not in result.stderr


def _port(base: str, profile: str, index: int = 0):
    from tatolab._host.ports import InputPort
    from tatolab._sdk.context import Inputs

    port = InputPort("rows", profile)
    reader = RingReader(base, index, profile)
    port.add_link("src/out->n/rows", reader)
    return port, Inputs("n", {"rows": port}), reader


def test_newest_hands_over_the_bag_it_delivered_and_counts_a_replaced_one_as_dropped(base):
    import msgspec

    create_ring(base, slot_size=256, slot_count=8)
    writer = RingWriter(base)
    port, inputs, reader = _port(base, "newest")
    writer.write(msgspec.msgpack.encode({"n": 1}))
    assert port.fill()  # a delivery: process() would be called now
    writer.write(msgspec.msgpack.encode({"n": 2}))  # arrives while process() runs
    assert inputs.read("rows") == {"n": 1}  # the ring is not read again within the delivery
    assert inputs.read("rows") == {"n": 2}  # asked for more: now it is
    writer.write(msgspec.msgpack.encode({"n": 3}))
    assert port.fill()
    writer.write(msgspec.msgpack.encode({"n": 4}))
    assert port.fill()  # 3 replaced before the node read it
    assert inputs.read("rows") == {"n": 4}
    counters = read_counters(base)["readers"][0]
    assert (counters["read"], counters["dropped"], counters["behind"]) == (3, 1, 0)
    reader.close()
    writer.close()


def test_bags_taken_off_the_ring_but_never_handed_over_go_back_for_the_next_reader(base):
    import msgspec

    create_ring(base, slot_size=256, slot_count=64)
    writer = RingWriter(base)
    for n in range(10):
        writer.write(msgspec.msgpack.encode({"n": n}))
    port, inputs, reader = _port(base, "ordered")
    assert [inputs.read("rows")["n"] for _ in range(3)] == [0, 1, 2]  # 3..9 wait in memory
    port.remove_link("src/out->n/rows").close()  # the node stops
    assert read_counters(base)["readers"][0]["read"] == 3
    port, inputs, reader = _port(base, "ordered")  # the node again, on the same record
    assert [inputs.read("rows")["n"] for _ in range(7)] == list(range(3, 10))
    counters = read_counters(base)["readers"][0]
    assert (counters["read"], counters["dropped"], counters["behind"]) == (10, 0, 0)
    reader.close()
    writer.close()
