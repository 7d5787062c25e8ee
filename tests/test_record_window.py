"""Recording before and after a trigger: `tatolab record ... --before --after --on --when` keeps a
bounded ring in memory and writes a numbered file per window, t - before to t + after, with every
bag of that span; a trigger inside an open window extends it; `record --trigger ID` triggers now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcap.reader import make_reader

from harness import Runtime, make_project, wait_for
from test_record import COUNTER

pytestmark = pytest.mark.slow

TICKS = '''
from tatolab.stream import node


@node(execution="continuous", interval_ms=250)
class Ticks:
    """A bag every quarter second: k = 0, 1, 2..."""

    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self, config) -> None:
        self.k = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("ticks", {"k": self.k})
        self.k += 1
'''

STREAM = '''
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.ticks import Ticks


@stream
def src(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Counter, name="counter")
    stream_builder.add(Ticks, name="ticks")
'''

BEFORE_S, AFTER_S = 2.0, 1.0


def _written(runtime: Runtime, node: str, port: str) -> int:
    graph = json.loads(runtime.cli("graph", "--stream", "src", check=True).stdout)
    return next(p["written"] for n in graph["streams"][0]["nodes"] if n["name"] == node
                for p in n["outputs"] if p["port"] == port) or 0


def _recording(runtime: Runtime) -> dict:
    graph = json.loads(runtime.cli("graph", check=True).stdout)
    return graph["recordings"][0] if graph["recordings"] else {}


def _counts(path: Path) -> list[tuple[int, int]]:
    with open(path, "rb") as f:
        reader = make_reader(f)
        assert reader.get_summary() is not None  # finished and indexed
        return [(m.log_time, json.loads(m.data)["n"]) for _, _, m in reader.iter_messages(topics=["src/counter/count"])]


def test_a_trigger_at_t_writes_t_minus_before_to_t_plus_after_with_every_bag_and_extends_and_numbers(
        project_venv, runtime, tmp_path):
    project = make_project(tmp_path / "src", project_venv, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                            "nodes/counter.py": COUNTER, "nodes/ticks.py": TICKS})
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: _written(runtime, "counter", "count") > 0, timeout=60, what="the counter to write")
    out = tmp_path / "incident.mcap"
    # the tick due about 3 s from now triggers, and the next one (within the window) extends it
    k = _written(runtime, "ticks", "ticks") + 12
    started = runtime.cli("record", "src/counter/count", "--out", str(out), "--before", f"{BEFORE_S:g}s",
                          "--after", f"{AFTER_S * 1000:g}ms", "--on", "src/ticks/ticks", "--when", f"k in [{k}, {k + 1}]",
                          "--max-mb", "64", "--detach", check=True).stdout
    rid = started.split()[1].rstrip(":")
    # the ring's memory shows in graph while it runs, bounded
    wait_for(lambda: _recording(runtime).get("ring", {}).get("seconds", 0) > 1.0, timeout=30,
             what="the ring to hold a second")
    ring = _recording(runtime)["ring"]
    assert ring["max_bytes"] == 64_000_000 and 0 < ring["bytes"] <= ring["max_bytes"]
    wait_for(lambda: [f["state"] for f in _recording(runtime).get("files", [])] == ["done"], timeout=60,
             what="the first window's file to be finished")
    (first,) = _recording(runtime)["files"]
    assert first["path"] == str(tmp_path / "incident-1.mcap") and first["triggers"] == 2
    t = first["trigger_ns"]
    counts = _counts(Path(first["path"]))
    times = [time for time, _ in counts]
    # t - before .. (second trigger, a quarter second later) + after, within a second at each end
    assert abs(times[0] - (t - BEFORE_S * 1e9)) < 1e9, (times[0] - t) / 1e9
    assert abs(times[-1] - (first["to_ns"])) < 1e9 and first["to_ns"] > t + AFTER_S * 1e9
    assert times[-1] - times[0] >= (BEFORE_S + AFTER_S) * 1e9 - 1e9
    ns = [n for _, n in counts]
    assert ns == list(range(ns[0], ns[0] + len(ns))), "a bag of the span is missing"

    # a trigger by hand after the window closed: the next numbered file
    assert "triggered" in runtime.cli("record", "--trigger", rid, check=True).stdout
    wait_for(lambda: [f["state"] for f in _recording(runtime).get("files", [])] == ["done", "done"], timeout=60,
             what="the second window's file")
    second = _recording(runtime)["files"][1]
    assert second["path"] == str(tmp_path / "incident-2.mcap")
    ns2 = [n for _, n in _counts(Path(second["path"]))]
    assert ns2 == list(range(ns2[0], ns2[0] + len(ns2))) and len(ns2) > 100
    stopped = runtime.cli("record", "--stop", rid, check=True).stdout
    assert "incident-1.mcap" in stopped and "incident-2.mcap" in stopped
    assert not out.exists()  # only the numbered files
    # a bad expression is refused before anything is written, naming what is allowed
    bad = runtime.cli("record", "src/counter/count", "--out", str(tmp_path / "bad.mcap"), "--on", "src/ticks/ticks",
                      "--when", "__import__('os')")
    assert bad.returncode != 0 and "only len, abs, min and max may be called" in bad.stderr, bad.stderr


def test_split_by_seconds_and_size_writes_numbered_indexed_files_none_overwritten(project_venv, runtime, tmp_path):
    project = make_project(tmp_path / "src", project_venv, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                            "nodes/counter.py": COUNTER, "nodes/ticks.py": TICKS})
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: _written(runtime, "counter", "count") > 0, timeout=60, what="the counter to write")
    out = tmp_path / "long.mcap"
    (tmp_path / "long-1.mcap").write_bytes(b"someone else's")  # a name taken: never overwritten
    done = runtime.cli("record", "src/counter/count", "--out", str(out), "--split-seconds", "1", "--seconds", "3.5",
                       check=True).stdout
    assert (tmp_path / "long-1.mcap").read_bytes() == b"someone else's"
    files = sorted(tmp_path.glob("long-*.mcap"), key=lambda p: int(p.stem.split("-")[1]))[1:]
    assert [p.name for p in files][:3] == ["long-2.mcap", "long-3.mcap", "long-4.mcap"], done
    assert all(f"file {p}" in done for p in files), done
    ns = [n for p in files for _, n in _counts(p)]  # each indexed (_counts checks), together every bag
    assert len(ns) > 300 and ns == list(range(ns[0], ns[0] + len(ns)))
    assert not out.exists()

    by_size = tmp_path / "sized.mcap"
    runtime.cli("record", "src/counter/count", "--out", str(by_size), "--split-mb", "0.01", "--compression", "none",
                "--bags", "600", check=True)
    sized = sorted(tmp_path.glob("sized-*.mcap"))
    assert len(sized) >= 2 and all(p.stat().st_size < 200_000 for p in sized)
    assert sum(len(_counts(p)) for p in sized) == 600


def test_the_before_ring_is_bounded_by_max_mb_whatever_the_rate(project_venv, runtime, tmp_path):
    project = make_project(tmp_path / "src", project_venv, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                            "nodes/counter.py": COUNTER, "nodes/ticks.py": TICKS})
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: _written(runtime, "counter", "count") > 0, timeout=60, what="the counter to write")
    started = runtime.cli("record", "src/counter/count", "--out", str(tmp_path / "small.mcap"), "--before", "60s",
                          "--after", "1s", "--max-mb", "0.05", "--detach", check=True).stdout
    rid = started.split()[1].rstrip(":")
    wait_for(lambda: _recording(runtime).get("ring", {}).get("trimmed_by_size", 0) > 100, timeout=60,
             what="the ring to drop its oldest for --max-mb")
    ring = _recording(runtime)["ring"]
    assert ring["max_bytes"] == 50_000 and ring["bytes"] <= 50_000 and ring["seconds"] < 60
    runtime.cli("record", "--trigger", rid, check=True)
    wait_for(lambda: [f["state"] for f in _recording(runtime).get("files", [])] == ["done"], timeout=60,
             what="the window's file")
    (file,) = _recording(runtime)["files"]
    assert file["cut_by_max_mb"] is True  # it says its start is later than --before asked
    listed = runtime.cli("record", "--stop", rid, check=True).stdout
    assert "its start was cut by --max-mb" in listed, listed
