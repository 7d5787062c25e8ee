"""Reliability scenarios, at any size: churn, soak, faults and bad input.

One module for both forms: ``tests/test_reliability*.py`` run each scenario reduced, and
``bench/reliability.py`` runs them at full size and writes ``docs/reliability.md``. Every
scenario starts its own tatolabd on temporary paths (``harness.Runtime``) and returns a
``Result``: the figures it measured and the problems it found, none when the promise held.
A scenario never stops at its first problem, so the full form reports everything it saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, PASS_THROUGH, SINK

from tatolab._control.client import Client, RequestFailed

MIB = 1024 * 1024


@dataclass
class Result:
    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None

    def expect(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def check(self) -> None:
        """For pytest: fail with every problem the scenario found."""
        assert not self.problems, f"{self.name}:\n  " + "\n  ".join(self.problems)


@dataclass
class Setup:
    """Where a scenario may put its runtimes and projects, and the project .venv to link."""

    scratch: Path
    venv: Path


# --- talking to a runtime --------------------------------------------------------------------

def call(rt: Runtime, op: str, **args: Any) -> Any:
    client = Client(rt.socket)
    try:
        return client.request(op, **args)
    finally:
        client.close()


def attach(rt: Runtime, project: Path) -> Client:
    """What `tatolab run` does: load attached; closing the returned client unloads the stream."""
    client = Client(rt.socket)
    try:
        client.request("load", project=str(project), mode="attached")
    except BaseException:
        client.close()
        raise
    return client


def graph(rt: Runtime, stream: str) -> dict[str, Any]:
    streams = call(rt, "graph", stream=stream)["streams"]
    return streams[0] if streams else {}


def nodes_by_name(rt: Runtime, stream: str) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in graph(rt, stream).get("nodes", [])}


def all_running(rt: Runtime, stream: str, count: int) -> dict[str, dict[str, Any]] | None:
    """The stream's nodes when all ``count`` of them run with a process, else None."""
    try:
        nodes = nodes_by_name(rt, stream)
    except (OSError, RequestFailed):
        return None
    if len(nodes) == count and all(n["state"] == "running" and n["pid"] for n in nodes.values()):
        return nodes
    return None


def loaded_names(rt: Runtime) -> set[str]:
    return {row["name"] for row in call(rt, "streams")["streams"] if row["state"] in ("attached", "kept")}


def rss(pid: int) -> int | None:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def fds(pid: int) -> int | None:
    try:
        return psutil.Process(pid).num_fds()
    except psutil.Error:
        return None


def settled_fds(pid: int) -> int:
    """Descriptors held at rest: the fewest seen over half a second (a closing client's socket is transient)."""
    seen = []
    for _ in range(10):
        seen.append(fds(pid) or 0)
        time.sleep(0.05)
    return min(seen)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


@contextlib.contextmanager
def running(root: Path, result: Result) -> Iterator[Runtime]:
    """A started tatolabd; afterwards every process, shared-memory file and socket of it must be gone."""
    rt = Runtime(root).start()
    try:
        yield rt
    finally:
        rt.stop()
        left = rt.leftover_processes()
        result.expect(not left, f"processes left behind after the runtime stopped: {left}")
        for pid in left:  # (leftover_processes names only this runtime's own processes, by start time too)
            with contextlib.suppress(OSError, psutil.Error):
                rt.seen[pid].kill()
        result.expect(rt.shm_files() == [], f"shared-memory files left behind: {rt.shm_files()}")
        result.expect(not rt.socket.exists(), f"the control socket {rt.socket} was left behind")


# --- the projects ----------------------------------------------------------------------------

STOPPABLE_COUNTER = COUNTER.replace("interval_ms=5", "interval_ms=INTERVAL")

SIX_NODES = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.doubler import Doubler
from nodes.sinks import NewestSink, OrderedSink


@stream
def NAME(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter, config={"stop_file": "stop"})
    relays = [stream_builder.add(Doubler, name=f"relay{i}") for i in (1, 2, 3)]
    ordered = stream_builder.add(OrderedSink, config={"path": "ordered.jsonl"})
    newest = stream_builder.add(NewestSink, config={"path": "newest.jsonl", "delay_ms": 20})
    stream_builder.connect(counter.output("counts"), relays[0].input("numbers"))
    stream_builder.connect(relays[0].output("doubled"), relays[1].input("numbers"))
    stream_builder.connect(relays[1].output("doubled"), relays[2].input("numbers"))
    stream_builder.connect(relays[2].output("doubled"), ordered.input("rows"))
    stream_builder.connect(counter.output("counts"), newest.input("rows"))
"""

TWO_NODES = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink


@stream
def NAME(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
"""


def project_files(stream: str, name: str, interval_ms: int = 5, extra: dict[str, str] | None = None) -> dict[str, str]:
    files = {
        "stream.py": stream.replace("NAME", name),
        "nodes/__init__.py": "",
        "nodes/counter.py": STOPPABLE_COUNTER.replace("INTERVAL", str(interval_ms)),
        "nodes/doubler.py": PASS_THROUGH,
        "nodes/sinks.py": SINK,
    }
    files.update(extra or {})
    return files


def new_project(setup: Setup, folder: str, files: dict[str, str]) -> Path:
    return make_project(setup.scratch / folder, setup.venv, files).resolve()


# --- churn -----------------------------------------------------------------------------------

CHURN_KINDS = ("attached", "kept then stop", "kept then rm")


def churn(setup: Setup, cycles: int = 30) -> Result:
    """Load and stop one stream ``cycles`` times (attached, kept then stopped, kept then removed)."""
    result = Result("churn")
    project = new_project(setup, "churn", project_files(TWO_NODES, "churn"))
    started = time.monotonic()
    with running(setup.scratch / "rt-churn", result) as rt:
        daemon = rt.process.pid
        baseline: dict[str, int] = {}
        done = 0
        for i in range(cycles):
            kind = CHURN_KINDS[i % len(CHURN_KINDS)]
            client = attach(rt, project) if kind == "attached" else None
            if client is None:
                call(rt, "load", project=str(project), mode="kept")
            nodes = wait_for(lambda: all_running(rt, "churn", 2), timeout=60, what=f"cycle {i}: both nodes running")
            pids = [n["pid"] for n in nodes.values()]  # type: ignore[union-attr]
            rt.node_pids()
            if client is not None:
                client.close()
            else:
                call(rt, "stop" if kind == "kept then stop" else "rm", name="churn")
            wait_for(lambda: "churn" not in loaded_names(rt), timeout=30, what=f"cycle {i}: the stream to unload")
            wait_for(lambda: not any(alive(p) for p in pids), timeout=30, what=f"cycle {i}: its node processes to end")
            try:
                wait_for(lambda: rt.shm_files() == [], timeout=15, what=f"cycle {i}: its shared memory to be removed")
            except AssertionError:
                result.problems.append(f"cycle {i} ({kind}) left shared memory: {rt.shm_files()}")
                break
            done += 1
            if i == len(CHURN_KINDS) - 1:  # once every kind ran once, the code all cycles use is imported
                baseline = {"rss": rss(daemon) or 0, "fds": settled_fds(daemon)}
        if "churn" in {row["name"] for row in call(rt, "streams")["streams"]}:
            call(rt, "rm", name="churn")
        end_rss, end_fds = rss(daemon) or 0, settled_fds(daemon)
        result.figures.update(
            cycles=done, seconds=round(time.monotonic() - started, 1), processes_started=len(rt.seen),
            runtime_rss_start_mib=round(baseline.get("rss", 0) / MIB, 1), runtime_rss_end_mib=round(end_rss / MIB, 1),
            runtime_fds_start=baseline.get("fds"), runtime_fds_end=end_fds,
        )
        if baseline:
            result.expect(end_rss <= baseline["rss"] * 1.10,
                          f"the runtime grew from {baseline['rss'] / MIB:.1f} MiB to {end_rss / MIB:.1f} MiB "
                          f"over {done} cycles (more than 10 %)")
            result.expect(end_fds == baseline["fds"],
                          f"the runtime held {baseline['fds']} descriptors after the first cycles and {end_fds} at the end")
        left = rt.leftover_processes()
        result.expect(not left, f"node processes alive after their streams stopped: {left}")
    return result


# --- soak ------------------------------------------------------------------------------------

def _ordered_rows(path: Path) -> list[int]:
    numbers = []
    with open(path) as rows:
        for line in rows:
            if line.endswith("}\n"):
                numbers.append(json.loads(line)["n"])
    return numbers


def _sample(rt: Runtime, stream: str) -> dict[str, Any]:
    nodes = nodes_by_name(rt, stream)
    pids = {"tatolabd": rt.process.pid, **{name: n["pid"] for name, n in nodes.items()}}
    return {
        "rss": {name: rss(pid) for name, pid in pids.items() if pid},
        "fds": {name: settled_fds(pid) if name == "tatolabd" else fds(pid) for name, pid in pids.items() if pid},
        "pids": pids,
        "shm": len(rt.shm_files()),
        "written": next(l["counters"]["written"] for l in graph(rt, stream)["links"] if l["from"]["node"] == "counter"),
    }


def _flat(samples: list[dict[str, Any]], name: str) -> tuple[int, int]:
    """Largest resident size in the first and the last quarter of the run (after warm-up)."""
    series = [s["rss"][name] for s in samples if s["rss"].get(name)]
    quarter = max(1, len(series) // 4)
    return max(series[:quarter]), max(series[-quarter:])


def soak(setup: Setup, seconds: float = 20, interval_ms: int = 2) -> Result:
    """Six nodes (a counter, three ordered relays, an ordered and a slow newest sink) under load."""
    result = Result("soak")
    project = new_project(setup, "soak", project_files(SIX_NODES, "soak", interval_ms))
    with running(setup.scratch / "rt-soak", result) as rt:
        client = attach(rt, project)
        try:
            wait_for(lambda: all_running(rt, "soak", 6), timeout=60, what="the six nodes to run")
            wait_for(lambda: len(_ordered_rows(project / "ordered.jsonl")) if (project / "ordered.jsonl").exists() else 0,
                     timeout=60, what="the first bag through all relays")
            samples = []
            started = time.monotonic()
            step = max(1.0, seconds / 40)
            while time.monotonic() - started < seconds:
                samples.append(_sample(rt, "soak"))
                time.sleep(step)  # the sampling period of a measurement, not a synchronisation
            (project / "stop").touch()
            elapsed = time.monotonic() - started
            counters = lambda: {l["key"]: l["counters"] for l in graph(rt, "soak")["links"]}  # noqa: E731
            wait_for(lambda: all(c["behind"] == 0 for c in counters().values()),
                     timeout=120, what="every link to drain after the counter stopped")
            final = _sample(rt, "soak")
            links = graph(rt, "soak")["links"]
            nodes = nodes_by_name(rt, "soak")
        finally:
            client.close()
        wait_for(lambda: "soak" not in loaded_names(rt), timeout=30, what="the soak stream to unload")
    written = final["written"]
    rows = _ordered_rows(project / "ordered.jsonl")
    ordered = [l for l in links if l["delivery_profile"] == "ordered"]
    dropped_ordered = sum(l["counters"]["dropped"] for l in ordered)
    first_written = samples[0]["written"]
    result.figures.update(
        seconds=round(elapsed, 1), nodes=len(nodes), bags_written=written,
        bags_per_second=round((samples[-1]["written"] - first_written) / max(elapsed, 1e-9), 1),
        ordered_rows=len(rows), ordered_dropped=dropped_ordered,
        newest_dropped=sum(l["counters"]["dropped"] for l in links if l["delivery_profile"] == "newest"),
        samples=len(samples), shm_entries=sorted({s["shm"] for s in samples} | {final["shm"]}),
    )
    for link in links:
        c = link["counters"]
        result.expect(c["written"] == c["read"] + c["dropped"] + c["behind"],
                      f"link {link['key']}: written {c['written']} != read {c['read']} + dropped {c['dropped']} "
                      f"+ behind {c['behind']}")
    result.expect(len(rows) == len(set(rows)) and rows == sorted(rows), "the ordered sink saw a bag twice or out of order")
    newest_link = next(l["counters"] for l in links if l["delivery_profile"] == "newest")
    newest_rows = len(read_jsonl(project / "newest.jsonl"))
    result.expect(newest_rows == newest_link["read"],
                  f"the newest link counts {newest_link['read']} bags read, and its node received {newest_rows}")
    missing = written - len(set(rows))
    result.expect(missing == dropped_ordered,
                  f"{missing} bags never reached the ordered sink, and the ordered links count {dropped_ordered} dropped")
    result.expect(all(n["restarts"] == 0 for n in nodes.values()),
                  f"nodes restarted during the soak: { {k: n['restarts'] for k, n in nodes.items() if n['restarts']} }")
    growth = {}
    for name in samples[0]["rss"]:
        first, last = _flat(samples, name)
        growth[name] = f"{first / MIB:.1f} → {last / MIB:.1f} MiB"
        result.expect(last <= first * 1.10, f"{name} grew from {first / MIB:.1f} MiB to {last / MIB:.1f} MiB (not flat)")
    result.figures["memory"] = growth
    for name in samples[0]["fds"]:
        seen = {s["fds"].get(name) for s in samples} | {final["fds"].get(name)}
        result.expect(len(seen) == 1, f"{name}'s descriptors changed during the soak: {sorted(x for x in seen if x)}")
    result.figures["runtime_fds"] = final["fds"]["tatolabd"]
    result.expect(len(result.figures["shm_entries"]) == 1,
                  f"/dev/shm entries changed during the soak: {result.figures['shm_entries']}")
    return result


# --- faults ----------------------------------------------------------------------------------

def kill_nodes(setup: Setup, seconds: float = 10, seed: int = 9) -> Result:
    """SIGKILL a random node of the six every second under load; every one comes back, nothing is left."""
    result = Result("kill nodes")
    chooser = random.Random(seed)
    project = new_project(setup, "killing", project_files(SIX_NODES, "killing", 2))
    with running(setup.scratch / "rt-kill", result) as rt:
        client = attach(rt, project)
        try:
            wait_for(lambda: all_running(rt, "killing", 6), timeout=60, what="the six nodes to run")
            shm_before = rt.shm_files()
            killed: list[int] = []
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                candidates = [n for n in nodes_by_name(rt, "killing").values() if n["pid"] and n["state"] == "running"]
                if candidates:
                    victim = chooser.choice(candidates)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim["pid"], signal.SIGKILL)
                        killed.append(victim["pid"])
                time.sleep(1.0)  # the fault schedule: one kill a second
            nodes = wait_for(lambda: all_running(rt, "killing", 6), timeout=60,
                             what="every killed node to run again")
            restarts = sum(n["restarts"] for n in nodes.values())  # type: ignore[union-attr]
            rows_then = len(read_jsonl(project / "ordered.jsonl"))
            flowing = True
            try:
                wait_for(lambda: len(read_jsonl(project / "ordered.jsonl")) > rows_then + 20, timeout=60,
                         what="bags to flow through all relays after the last kill")
            except AssertionError as exc:
                flowing = result.expect(False, str(exc))
            orphans = [pid for pid in killed if alive(pid)]
            shm_after = rt.shm_files()
        finally:
            client.close()
    result.figures.update(kills=len(killed), restarts=restarts, flowing_after=flowing)
    result.expect(restarts >= len(killed), f"{len(killed)} kills but only {restarts} restarts")
    result.expect(not orphans, f"killed node processes still alive: {orphans}")
    result.expect(shm_after == shm_before, f"shared-memory files changed under kills: {shm_before} → {shm_after}")
    return result


BUSY = """
import time
from tatolab.stream import node


@node(execution="continuous", interval_ms=1, watchdog_ms=1000)
class Busy:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        time.sleep(0.05)  # almost always inside process(), so a SIGSTOP lands there
        ctx.outputs.write("out", {"t": ctx.time})
"""

ONE_NODE = """
from tatolab.stream import StreamBuilder, stream
from nodes.NODE import CLASS


@stream
def NAME(stream_builder: StreamBuilder) -> None:
    stream_builder.add(CLASS)
"""


def stopped_node(setup: Setup) -> Result:
    """SIGSTOP a node inside process(): reported hung, killed and started again."""
    result = Result("SIGSTOP a node")
    project = new_project(setup, "frozen", {
        "stream.py": ONE_NODE.replace("NODE", "busy").replace("CLASS", "Busy").replace("NAME", "frozen"),
        "nodes/__init__.py": "", "nodes/busy.py": BUSY,
    })
    with running(setup.scratch / "rt-stop", result) as rt:
        client = attach(rt, project)
        try:
            pid = wait_for(lambda: all_running(rt, "frozen", 1), timeout=60, what="the node to run")["busy"]["pid"]
            for _ in range(5):  # the stop must land inside process(); a later try catches a rare miss
                os.kill(pid, signal.SIGSTOP)
                if nodes_by_name(rt, "frozen")["busy"]["busy_ms"] is not None:
                    break
                os.kill(pid, signal.SIGCONT)
                wait_for(lambda: nodes_by_name(rt, "frozen")["busy"]["busy_ms"] is not None, timeout=10,
                         what="the node to be inside process() again")
            stopped_at = time.monotonic()
            node = wait_for(lambda: (n := nodes_by_name(rt, "frozen")["busy"])["pid"] not in (None, pid)
                            and n["state"] == "running" and n, timeout=60, what="the stopped node to be replaced")
            recovered_s = time.monotonic() - stopped_at
        finally:
            client.close()
    result.figures.update(hangs=node["hangs"], restarts=node["restarts"], recovered_s=round(recovered_s, 1))
    result.expect(node["hangs"] == 1, f"the stopped node was counted hung {node['hangs']} times, not once")
    result.expect((node["last_error"] or "").startswith("hung: process() has not returned"),
                  f"last_error does not say hung: {node['last_error']!r}")
    result.expect(not alive(pid), f"the stopped process {pid} is still there")
    return result


HELPER_CHILD = """
import subprocess
from tatolab.stream import node


@node(execution="continuous", interval_ms=20)
class WithHelper:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.helper = subprocess.Popen(["sleep", "600"])

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"helper": self.helper.pid})
"""


def both_back(rt: Runtime) -> bool:
    """alpha and beta run, and beta's helper process is started; raises once either is failed."""
    failed = {row["name"]: row.get("reason") for row in call(rt, "streams")["streams"] if row["state"] == "failed"}
    if failed:
        raise AssertionError(f"kept streams were marked failed: {failed}")
    beta = all_running(rt, "beta", 1)
    return bool(all_running(rt, "alpha", 2) and beta and beta["withhelper"]["outputs"][0]["written"] > 0)


def kill_runtime(setup: Setup, kills: int = 3) -> Result:
    """SIGKILL the runtime under load with two kept streams: they come back, nothing is orphaned,
    and no stream is marked failed for kills it did not cause (finding 15)."""
    result = Result("kill the runtime")
    alpha = new_project(setup, "alpha", project_files(TWO_NODES, "alpha"))
    beta = new_project(setup, "beta", {
        "stream.py": ONE_NODE.replace("NODE", "helper").replace("CLASS", "WithHelper").replace("NAME", "beta"),
        "nodes/__init__.py": "", "nodes/helper.py": HELPER_CHILD,
    })
    survived = 0
    orphans: list[int] = []
    with running(setup.scratch / "rt-crash", result) as rt:
        call(rt, "load", project=str(alpha), mode="kept")
        call(rt, "load", project=str(beta), mode="kept")
        for k in range(kills):
            try:
                wait_for(lambda: both_back(rt), timeout=60, what="both kept streams to run")
                rows = len(read_jsonl(alpha / "out.jsonl"))
                wait_for(lambda: len(read_jsonl(alpha / "out.jsonl")) > rows + 10, timeout=60,
                         what="alpha to produce")
            except AssertionError as exc:
                rows_now = {row["name"]: (row["state"], row.get("reason")) for row in call(rt, "streams")["streams"]}
                result.expect(False, f"after {k} runtime kills: {exc}; streams: {rows_now}")
                break
            tree = descendants(rt.process.pid)
            rt.stop(signal.SIGKILL)
            try:
                wait_for(lambda: not any(alive(p) for p in tree), timeout=15, what="the killed runtime's processes to end")
            except AssertionError:
                left = [p for p in tree if alive(p)]
                orphans += left
                names = [psutil.Process(p).name() for p in left if alive(p)]
                result.expect(False, f"kill {k + 1}: processes outlived the killed runtime: {left} ({names})")
                for pid in left:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            rt.start()
            survived += 1
        states = {row["name"]: row["state"] for row in call(rt, "streams")["streams"]}
        for name in ("alpha", "beta"):
            result.expect(states.get(name) == "kept",
                          f"{name} is {states.get(name)} after {survived} runtime kills it did not cause")
        back = False
        try:
            back = bool(wait_for(lambda: both_back(rt), timeout=60, what="both kept streams to run after the last kill"))
        except AssertionError as exc:
            result.expect(False, str(exc))
        for name in ("alpha", "beta"):
            with contextlib.suppress(RequestFailed):
                call(rt, "rm", name=name)
    result.figures.update(runtime_kills=survived, streams_back=back, orphans=len(orphans))
    return result


HOG = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=10, memory_limit_mb=150)
class Hog:
    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.kept = []

    def process(self, ctx) -> None:
        self.kept.append(bytearray(2 * 1024 * 1024))  # without bound
        ctx.outputs.write("out", {"held_mb": 2 * len(self.kept)})
"""

HOG_STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.hog import Hog
from nodes.sinks import OrderedSink


@stream
def hungry(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Hog)
    counter = stream_builder.add(Counter)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
"""


def memory_hog(setup: Setup, restarts: int = 2) -> Result:
    """A node allocating without bound is restarted by its memory limit, alone."""
    result = Result("unbounded allocation")
    project = new_project(setup, "hungry", project_files(HOG_STREAM, "hungry", extra={"nodes/hog.py": HOG}))
    with running(setup.scratch / "rt-hog", result) as rt:
        client = attach(rt, project)
        try:
            before = wait_for(lambda: all_running(rt, "hungry", 3), timeout=60, what="the three nodes to run")
            daemon_rss = rss(rt.process.pid) or 0
            after = wait_for(lambda: (n := nodes_by_name(rt, "hungry"))["hog"]["memory_restarts"] >= restarts and n,
                             timeout=120, what=f"{restarts} memory restarts of the hog")
            daemon_rss_after = rss(rt.process.pid) or 0
        finally:
            client.close()
    hog = after["hog"]
    result.figures.update(memory_restarts=hog["memory_restarts"], limit_mb=hog["memory_limit_mb"],
                          runtime_rss_mib=f"{daemon_rss / MIB:.1f} → {daemon_rss_after / MIB:.1f}")
    result.expect((hog["last_error"] or "").startswith("over its memory limit"),
                  f"the hog's last_error does not name its memory limit: {hog['last_error']!r}")
    for name in ("counter", "orderedsink"):
        result.expect(after[name]["pid"] == before[name]["pid"] and after[name]["restarts"] == 0,
                      f"{name} was restarted too, though only the hog outgrew its limit")
    result.expect(daemon_rss_after <= daemon_rss * 1.10 + 2 * MIB,
                  f"the runtime grew from {daemon_rss / MIB:.1f} to {daemon_rss_after / MIB:.1f} MiB beside the hog")
    return result


@contextlib.contextmanager
def small_disk(path: Path, size: str = "8m") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _fill(path: Path) -> int:
    """Write ``path`` until the disk under it is full; returns the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as filler:
        with contextlib.suppress(OSError):
            while True:
                written += filler.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                written += filler.write(b"\0")
    return written


def full_disk(setup: Setup) -> Result:
    """The state folder and the project's logs on a full disk: nodes still restart, the runtime stops
    and starts, kept streams load (finding 6)."""
    result = Result("full disk")
    if os.geteuid() != 0:
        result.skipped = "needs root to mount a small tmpfs"
        return result
    try:
        disk_cm = small_disk(setup.scratch / "disk")
        disk = disk_cm.__enter__()
    except (OSError, subprocess.CalledProcessError) as exc:
        result.skipped = f"could not mount a tmpfs: {exc}"
        return result
    files = project_files(TWO_NODES, "filled")
    files["stream.py"] = files["stream.py"].replace('"out.jsonl"', json.dumps(str(setup.scratch / "filled-out.jsonl")))
    project = make_project(disk / "project", setup.venv, files).resolve()
    outcomes: dict[str, bool] = {}
    try:
        rt = Runtime(disk / "rt").start()
        try:
            call(rt, "load", project=str(project), mode="kept")
            nodes = wait_for(lambda: all_running(rt, "filled", 2), timeout=60, what="the kept stream to run")
            filled = _fill(disk / "filler")
            result.figures["filled_bytes"] = filled

            def restarted(old: int) -> bool:
                try:
                    os.kill(old, signal.SIGKILL)
                    wait_for(lambda: (n := all_running(rt, "filled", 2)) and n["counter"]["pid"] != old,
                             timeout=30, what="the killed counter to run again on the full disk")
                    return True
                except (AssertionError, OSError, RequestFailed) as exc:
                    result.problems.append(f"full disk: {exc}")
                    return False

            outcomes["a killed node restarts"] = restarted(nodes["counter"]["pid"])
            try:
                call(rt, "streams")
                outcomes["the runtime answers"] = True
            except (OSError, RequestFailed) as exc:
                outcomes["the runtime answers"] = result.expect(False, f"full disk: `streams` failed: {exc}")
            rt.process.send_signal(signal.SIGTERM)
            code = rt.process.wait(timeout=30)
            outcomes["SIGTERM stops it cleanly"] = result.expect(
                code == 0 and not rt.socket.exists() and rt.shm_files() == [],
                f"full disk: SIGTERM ended the runtime with {code}, socket left: {rt.socket.exists()}, "
                f"shared memory left: {rt.shm_files()}")
            rt.stop()
            try:
                rt.start()
                outcomes["it starts again"] = True
            except AssertionError as exc:
                said = str(exc).strip().splitlines()
                outcomes["it starts again"] = result.expect(
                    False, f"full disk: the runtime did not start: {' / '.join(said[:2] + said[-1:])}")
            if outcomes["it starts again"]:
                try:
                    nodes = wait_for(lambda: all_running(rt, "filled", 2), timeout=60,
                                     what="the kept stream to load on the full disk")
                    outcomes["the kept stream loads"] = True
                except AssertionError as exc:
                    outcomes["the kept stream loads"] = result.expect(False, f"full disk: {exc}")
                (disk / "filler").unlink()
                if outcomes["the kept stream loads"]:
                    outcomes["a node restarts once space is back"] = restarted(nodes["counter"]["pid"])
                with contextlib.suppress(OSError, RequestFailed):
                    call(rt, "rm", name="filled")
        finally:
            rt.stop()
            left = rt.leftover_processes()
            result.expect(not left, f"full disk: processes left behind: {left}")
            for pid in left:  # (this runtime's own processes, by start time too)
                with contextlib.suppress(OSError, psutil.Error):
                    rt.seen[pid].kill()
            result.expect(rt.shm_files() == [], f"full disk: shared memory left behind: {rt.shm_files()}")
    finally:
        disk_cm.__exit__(None, None, None)
    result.figures["held"] = f"{sum(outcomes.values())} of {len(outcomes)}"
    result.figures["checks"] = outcomes
    return result


# --- bad input -------------------------------------------------------------------------------

class Bystander:
    """Another client asking `ping` the whole time; it must always be answered."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.answered = 0
        self.failures: list[str] = []
        self.slowest_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Bystander":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                call(self.rt, "ping")
                self.answered += 1
            except Exception as exc:  # noqa: BLE001 - every failure is a finding to report
                self.failures.append(repr(exc))
            self.slowest_s = max(self.slowest_s, time.monotonic() - began)
            self._stop.wait(0.05)


def ask_raw(rt: Runtime, line: bytes, timeout: float = 20) -> dict[str, Any] | None:
    """Send one raw line on a fresh connection; the first answer, or None when none came."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(rt.socket))
        sock.sendall(line)
        data = b""
        while not data.endswith(b"\n"):
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                break
            data += chunk
    first = data.split(b"\n", 1)[0]
    return json.loads(first) if first.strip() else None


def unclear(answer: dict[str, Any] | None) -> str | None:
    """What is wrong with an answer to a bad request, or None when it is a clear error (or a result)."""
    if not isinstance(answer, dict):
        return "no answer"
    if answer.get("ok") is True:
        return None
    error = answer.get("error")
    if not isinstance(error, str) or not error.strip():
        return f"an error answer without a message: {answer}"
    if "Traceback" in error or error.startswith("internal error"):
        return f"not a clear error: {error[:300]}"
    return None


def fuzz_control(setup: Setup, examples: int = 150) -> Result:
    """Hypothesis writes requests, byte soup to well-formed ones with wrong arguments, on fresh
    connections while a stream runs and another client keeps asking; each gets a clear answer."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    from tatolab._runtime.ops import OPS, load_all

    load_all()
    result = Result("fuzz the control socket")
    project = new_project(setup, "bystander", project_files(TWO_NODES, "bystander"))
    tried: dict[str, int] = {"bytes": 0, "json": 0, "requests": 0}
    bad: list[str] = []
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    )
    arg_names = sorted({name for op in OPS.values() for name in op.arguments.__struct_fields__}
                       | {"name", "project", "address", "stream"})
    requests = st.fixed_dictionaries(
        {"op": st.sampled_from(sorted(OPS)) | st.text(max_size=10)},
        optional={"args": st.dictionaries(st.sampled_from(arg_names) | st.text(max_size=6), json_values, max_size=4)
                  | json_values},
    )
    lines = st.one_of(
        st.binary(min_size=1, max_size=300).map(lambda b: ("bytes", b.replace(b"\n", b" ") + b"\n")),
        json_values.map(lambda v: ("json", json.dumps(v).encode() + b"\n")),
        requests.map(lambda r: ("requests", json.dumps(r).encode() + b"\n")),
    )
    with running(setup.scratch / "rt-fuzz", result) as rt:
        client = attach(rt, project)
        try:
            wait_for(lambda: all_running(rt, "bystander", 2), timeout=60, what="the bystander stream to run")
            rows_before = len(read_jsonl(project / "out.jsonl"))
            with Bystander(rt) as bystander:
                @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
                @given(lines)
                def each(kind_line: tuple[str, bytes]) -> None:
                    kind, line = kind_line
                    if not line.strip():
                        return
                    tried[kind] += 1
                    try:
                        answer = ask_raw(rt, line)
                    except (OSError, ValueError) as exc:
                        answer = None
                        bad.append(f"{line[:120]!r}: {exc!r}")
                    problem = unclear(answer)
                    if problem is not None:
                        bad.append(f"{line[:120]!r}: {problem}")
                    if rt.process.poll() is not None:
                        raise AssertionError(f"the runtime died on {line[:200]!r}")

                try:
                    each()
                except AssertionError as exc:
                    result.problems.append(str(exc))
                fixed = {
                    "JSON nested 100,000 deep": b"[" * 100_000 + b"\n",
                    "a request of 17 MiB": b'{"op": "ping", "pad": "' + b"x" * (17 * MIB) + b'"}\n',
                    "invalid UTF-8": b'{"op": "\xff\xfe"}\n',
                }
                for what, line in fixed.items():
                    try:
                        problem = unclear(ask_raw(rt, line))
                    except OSError as exc:
                        problem = f"no answer, the connection broke: {exc}"
                    if problem is not None:
                        bad.append(f"{what}: {problem}")
            wait_for(lambda: len(read_jsonl(project / "out.jsonl")) > rows_before + 10, timeout=30,
                     what="the running stream to keep producing")
            result.expect("bystander" in loaded_names(rt), "the running stream was unloaded during the fuzzing")
        finally:
            client.close()
        alive_after = rt.process is not None and rt.process.poll() is None
    result.figures.update(tried=sum(tried.values()) + len(fixed), by_kind={**tried, "fixed": len(fixed)},
                          unclear_answers=len(bad), bystander_answers=bystander.answered,
                          bystander_slowest_s=round(bystander.slowest_s, 2))
    result.expect(alive_after, "the runtime died during the fuzzing")
    result.expect(not bystander.failures, f"the other client was refused {len(bystander.failures)} times: "
                                          f"{bystander.failures[:3]}")
    for problem in bad[:10]:
        result.problems.append(f"unclear answer to {problem}")
    if len(bad) > 10:
        result.problems.append(f"... and {len(bad) - 10} more unclear answers")
    return result


INJECTOR = """
import json
from tatolab.stream import node


@node(execution="continuous", interval_ms=5)
class Injector:
    @node.output()
    def bags(self) -> dict: ...

    def __init__(self) -> None:
        self.payloads = [bytes.fromhex(h) for h in json.load(open("payloads.json"))]
        self.i = 0

    def process(self, ctx) -> None:
        if self.i >= len(self.payloads):
            return
        # Past the encoder, straight into the ring: what a damaged or foreign writer would leave.
        ctx.outputs._ports["bags"].writer.write(self.payloads[self.i])
        ctx.outputs.write("bags", {"n": self.i})
        self.i += 1
"""

INJECTED = """
from tatolab.stream import StreamBuilder, stream
from nodes.injector import Injector
from nodes.sinks import OrderedSink


@stream
def injected(stream_builder: StreamBuilder) -> None:
    injector = stream_builder.add(Injector)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(injector.output("bags"), sink.input("rows"))
"""


def bad_payloads(examples: int) -> list[bytes]:
    """Payloads that are not bags, drawn by hypothesis: byte soup, msgpack that is not a map,
    and nesting far past any limit."""
    import msgspec
    from hypothesis import HealthCheck, assume, given, settings, strategies as st

    def not_a_bag(data: bytes) -> bool:
        try:
            return not isinstance(msgspec.msgpack.decode(data), dict)
        except Exception:  # noqa: BLE001 - anything the decoder refuses is what we want
            return True

    values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=10)
                          | st.binary(max_size=10),
                          lambda inner: st.lists(inner, max_size=3), max_leaves=8)
    payloads = st.one_of(st.binary(min_size=1, max_size=200), values.map(msgspec.msgpack.encode))
    found: list[bytes] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(payloads)
    def collect(data: bytes) -> None:
        assume(not_a_bag(data))
        found.append(data)

    collect()
    return found + [b"\x91" * 200_000 + b"\xc0", b"\xdf\xff\xff\xff\xff"]  # 200k-deep arrays; a map claiming 4G keys


def fuzz_bags(setup: Setup, examples: int = 60) -> Result:
    """Bags that do not decode, each beside a good one: the reading node skips and counts them
    (``bad`` on its link, finding 10) and never restarts; every good bag arrives."""
    result = Result("fuzz the bag decoder")
    payloads = bad_payloads(examples)
    project = new_project(setup, "injected", {
        "stream.py": INJECTED, "nodes/__init__.py": "", "nodes/injector.py": INJECTOR, "nodes/sinks.py": SINK,
        "payloads.json": json.dumps([p.hex() for p in payloads]),
    })
    with running(setup.scratch / "rt-bags", result) as rt:
        client = attach(rt, project)
        try:
            before = wait_for(lambda: all_running(rt, "injected", 2), timeout=60, what="the two nodes to run")
            try:
                wait_for(lambda: len(read_jsonl(project / "out.jsonl")) >= len(payloads), timeout=60,
                         what=f"all {len(payloads)} good bags to arrive between the bad ones")
            except AssertionError as exc:
                result.problems.append(str(exc))
            after = nodes_by_name(rt, "injected")
            link = graph(rt, "injected")["links"][0]["counters"]
        finally:
            client.close()
    good = [row["n"] for row in read_jsonl(project / "out.jsonl")]
    sink = after["orderedsink"]
    result.figures.update(bad_bags=len(payloads), good_bags=len(good), counted_bad=link.get("bad"),
                          reader_restarts=sink["restarts"])
    result.expect(sink["restarts"] == 0 and sink["pid"] == before["orderedsink"]["pid"],
                  f"the reading node restarted {sink['restarts']} times on bags it could not decode "
                  f"(last error: {sink['last_error']})")
    result.expect(good == list(range(len(payloads))), f"{len(payloads) - len(good)} good bags were lost")
    result.expect(link.get("bad") == len(payloads),
                  f"the link counts {link.get('bad')} bad bags, not the {len(payloads)} sent")
    return result


SCENARIOS: dict[str, Callable[..., Result]] = {
    "churn": churn, "soak": soak, "kill-nodes": kill_nodes, "sigstop": stopped_node,
    "kill-runtime": kill_runtime, "full-disk": full_disk, "memory-hog": memory_hog,
    "fuzz-control": fuzz_control, "fuzz-bags": fuzz_bags,
}
