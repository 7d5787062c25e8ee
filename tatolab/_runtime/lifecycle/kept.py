"""Kept streams: their records, the runtime marker, and loading them from the recorded graph.

The decisions live in ``crashes.py`` (the two-crash rule), ``records.py`` (what a record
holds) and the runtime's core (core/streams.py: what each stop, start and removal does); this
module does the file and process work around them: it carries out the core's effects on storage.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Callable

from tatolab._graph import Graph
from tatolab._control.errors import ControlError, Fix, Reason
from tatolab._control.source import StreamSource
from tatolab._control.words import render
from tatolab._runtime.core import effects
from tatolab._runtime.surfaces import is_builtin
from tatolab._runtime.stored import snapshots
from tatolab._runtime.processes import trust
from tatolab._runtime.processes.environment import stream_env
from tatolab._runtime.stored import unwritten
from tatolab._runtime.rules.crashes import RunState, start_run
from tatolab._runtime.stored.records import DamagedRecord, KeptRecord, RecordStore, write_json_atomically
from tatolab._runtime.processes.starter import ProcessStarter
from tatolab._runtime.processes.starter import shared as shared_starter
from tatolab._words import counted

CHECK_TIMEOUT_S = 60
_CHECK_MARK = "TATOLAB-NODE-CHECK "

# Runs in the project's interpreter: can the node host start there, and does each node class import
# (as the node host imports it: tatolab/_classpath.py)?
_CHECK_SCRIPT = r"""
import json, sys
spec = json.loads(sys.stdin.readline())
if spec["sources"]:  # import as the node host will: from the kept snapshot, not the live files
    sys.path[:] = [p for p in sys.path if p not in ("", spec["project"])]
sys.path.insert(0, spec["sources"] or spec["project"])
problems = {}
try:
    import tatolab._host.main
    from tatolab._classpath import load_class
except BaseException as exc:
    problems[""] = type(exc).__name__ + ": " + str(exc)
for node, path in spec["classes"].items() if "" not in problems else ():
    try:
        load_class(path)
    except BaseException as exc:
        problems[node] = type(exc).__name__ + ": " + str(exc)
sys.stdout.flush()
print("MARK" + json.dumps(problems), flush=True)
""".replace("MARK", _CHECK_MARK)

Say = Callable[..., None]


def _quiet(level: str, message: str, **fields: Any) -> None:
    pass


class KeptStreams:
    """The kept streams' records and the marker saying what the running runtime is doing."""

    def __init__(self, state: Path, say: Say = _quiet) -> None:
        self.state = state
        self.store = RecordStore(state / "streams")
        self.sources = state / "sources"  # snapshots of kept projects' modules (snapshots.py)
        self.marker = state / "running.json"
        self.say = say

    # -- the runtime's start and clean stop ------------------------------------------------

    def begin(self) -> RunState:
        """Read the previous run's marker, apply the two-crash rule, and mark this run as running;
        this run's state, which the core (core/streams.py) keeps from now on."""
        for path in self.store.remove_leftover_temporaries():
            self.say("warning", f"removed {path}, a record write cut short by a crash; the record before it is intact")
        for path in self.store.strays():
            self.say("warning", f"{path} is not read: {path.stem!r} is not a stream name (lowercase letters, digits "
                     "and -._~); rename it to the name inside it, or remove it")
        previous = self._read_marker()
        every = self.store.read_all()
        records = {r.name: r for r in every if isinstance(r, KeptRecord)}
        # a snapshot a crash cut short, or one a replaced or removed record used (a damaged record's stay)
        damaged = frozenset(r.name for r in every if isinstance(r, DamagedRecord))
        snapshots.prune(self.sources, {name: r.sources for name, r in records.items()}, leave=damaged)
        verdict = start_run(previous, os.getpid(), set(records))
        if verdict.crashed:
            who = previous.pid if previous and previous.pid else "unknown"
            involved = ", ".join(f"{n} ({how})" for n, how in sorted(verdict.involved.items())) or "none"
            self.say("warning", f"the previous runtime (pid {who}) did not stop cleanly; kept streams involved: {involved}",
                     involved=verdict.involved)
        for name, reason in verdict.failed.items():
            record = records[name]
            record.failed = Reason(reason)
            self._save(record)
            # the runtime's terminal is read by a person: the fix in the CLI's words, by the one renderer
            said = Reason(f"kept stream {name} is marked failed and not loaded: {reason}", code="marked_failed",
                          fixes=(Fix("start", {"name": name}, "retries it"),))
            self.say("error", render(said), stream=name, fixes=said.to_wire()["fixes"])
        self.write_marker(verdict.state.to_json())
        return verdict.state

    def write_marker(self, state: dict[str, Any], *, clean: bool = False) -> None:
        """Write the marker as the core says (``clean``: the clean stop's)."""
        if not self._write_marker(state) and clean:
            # a full disk: the marker still says "running", which the next start would take for a
            # crash. Removing it needs no space, and no marker reads as a clean stop.
            try:
                self.marker.unlink()
            except OSError:
                pass

    def _read_marker(self) -> RunState | None:
        try:
            return RunState.from_json(json.loads(self.marker.read_bytes()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            # Only a hand edit does this (writes are atomic); count it as a crash nothing is known about.
            self.say("warning", f"the runtime marker {self.marker} cannot be read ({exc}); "
                     "treating the previous run as a crash with no stream known to be involved")
            return RunState(clean=False)

    def _write_marker(self, state: dict[str, Any]) -> bool:
        """A marker that cannot be written (a full disk) is told and counted, never raised: the
        next write that works brings it up to date. False when it could not be written."""
        try:
            write_json_atomically(self.marker, state)
        except OSError as exc:
            unwritten.failed(self.marker, exc)
            return False
        unwritten.worked(self.marker)
        return True

    def _save(self, record: KeptRecord) -> None:
        """Save a record, or tell and count why it could not be (a stop or start goes on)."""
        path = self.store.path(record.name)
        try:
            self.store.save(record)
        except OSError as exc:
            if unwritten.failed(path, exc):
                self.say("error", f"the record of kept stream {record.name} could not be written to {path} "
                         f"({unwritten.reason(exc)}); after a restart it may be as it was before",
                         stream=record.name)
        else:
            unwritten.worked(path)

    def carry(self, effect: effects.Effect, starting: KeptRecord | DamagedRecord | None = None) -> None:
        """Carry out one of the core's effects on storage (core/effects.py): the marker, a record's state,
        forgetting a record, a line in the runtime's log. ``starting``: the record the start under way
        wrote or read (a failed start marks that one)."""
        if isinstance(effect, effects.WriteMarker):
            self.write_marker(effect.state, clean=effect.clean)
        elif isinstance(effect, effects.Say):
            self.say(effect.level, effect.text, **effect.fields)
        elif isinstance(effect, effects.Forget):
            self.forget(effect.name)
        elif isinstance(effect, (effects.MarkFailed, effects.SetStopped)):
            record = starting if starting is not None else self.holder(effect.name)
            if not isinstance(record, KeptRecord):
                return
            if isinstance(effect, effects.MarkFailed):
                self.mark_failed(record, effect.reason)
            else:
                self.set_stopped(record, effect.stopped)
        else:
            raise AssertionError(f"{effect} is no effect on storage")

    # -- records ----------------------------------------------------------------------------

    def holder(self, name: str) -> KeptRecord | DamagedRecord | None:
        return self.store.read(name)

    def snapshot(self, name: str, project: Path) -> Path:
        """A new snapshot of ``project``'s modules for ``name`` (raises snapshots.SnapshotError)."""
        return snapshots.take(project, self.sources, name)

    def keep(self, name: str, source: StreamSource, python: Path, graph: Graph, *,
             env: dict[str, str] | None, sources: Path) -> KeptRecord:
        """Record a stream from `run -d` (replacing any record of that name) before it starts (the
        marker says it is loading already); the snapshot the replaced record used is removed once the
        new record is written."""
        record = KeptRecord(name=name, project=str(source.project), python=str(python), graph=graph,
                            target=source.target, file=source.file, env=env, sources=str(sources))
        self.store.save(record)
        snapshots.prune(self.sources, {name: str(sources)}, only=name)
        return record

    def mark_failed(self, record: KeptRecord, reason: Reason) -> None:
        record.failed = reason
        self._save(record)
        self.say("error", f"kept stream {record.name} cannot be loaded and is marked failed: {render(reason)}",
                 stream=record.name, project=record.project)

    def set_stopped(self, record: KeptRecord, stopped: bool) -> None:
        record.stopped = stopped
        record.failed = None
        self._save(record)

    def forget(self, name: str) -> None:
        self.store.remove(name)
        snapshots.forget(self.sources, name)

    def rows(self, loaded: set[str]) -> list[dict[str, Any]]:
        """`tatolab streams` rows for the records not loaded right now."""
        rows: list[dict[str, Any]] = []
        for record in self.store.read_all(shared=True):
            if record.name in loaded:
                continue
            if isinstance(record, DamagedRecord):
                rows.append({"name": record.name, "state": "failed", "nodes": None,
                             "project": record.project or "-", "reason": record.reason,
                             "fixes": [{"op": f.op, "args": f.args, "does": f.does} for f in record.fixes]})
                continue
            row: dict[str, Any] = {"name": record.name, "state": record.state, "nodes": None, "project": record.project}
            if record.failed:
                row["reason"] = record.failed.text
                if record.failed.code or record.failed.fixes:  # its own fixes, which the CLI words
                    row["why"] = record.failed.to_wire()
                row["fixes"] = [{"op": "start", "args": {"name": record.name}, "does": "retries it"},
                                {"op": "rm", "args": {"name": record.name}, "does": "forgets it"}]
            rows.append(row)
        return rows


def strip_reason(reason: Reason | str) -> Reason:
    reason = reason if isinstance(reason, Reason) else Reason(reason)
    return Reason(reason.text.strip().rstrip("."), reason.code, reason.fixes, reason.details)


async def preflight(record: KeptRecord, starter: ProcessStarter | None = None) -> Reason | None:
    """Why ``record`` cannot load from its recorded graph, or None: the project and its
    interpreter must exist, and the node host and every node class must import there."""
    project = Path(record.project)
    if not project.is_dir():
        return Reason(f"its project folder {project} is gone")
    try:  # it became another user's (or writable by others) since `run -d`: none of it runs
        await trust.check_async(project, None, record.env)
    except ControlError as exc:
        return exc.reason
    python = Path(record.python)
    if not python.exists():
        return Reason(f"its project's Python environment is gone: {python} does not exist", code="no_sdk",
                      fixes=(Fix("sdk", {"project": str(project)}, "makes it again with this runtime's SDK"),))
    if record.sources is not None and not Path(record.sources).is_dir():
        return Reason(f"the copy of its project's modules kept for it ({record.sources}) is gone", code="sources_gone",
                      fixes=(Fix("load", {"mode": "kept", "project": str(project)}, "to keep it again"),),
                      details={"sources": record.sources})
    # built-in nodes run in the runtime's own interpreter, not the project's: nothing to check there
    classes = {node["name"]: node["class"] for node in record.graph["nodes"]
               if node.get("class") and not is_builtin(node)}
    try:
        process = await (starter or shared_starter()).start(python, "-c", [_CHECK_SCRIPT], cwd=project,
                                                           env=stream_env(record.env))
    except OSError as exc:
        return Reason(f"its interpreter {python} cannot start: {exc.strerror}")
    request = json.dumps({"project": str(project), "sources": record.sources, "classes": classes}) + "\n"
    try:
        out, err = await asyncio.wait_for(process.communicate(request.encode()), CHECK_TIMEOUT_S)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        process.kill()
        await process.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Reason(f"importing its node classes with {python} did not finish within {CHECK_TIMEOUT_S} s")
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith(_CHECK_MARK)]
    if not lines:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {process.returncode}"]
        return Reason(f"checking its node classes with {python} failed: {tail[0]}")
    problems: dict[str, str] = json.loads(lines[-1][len(_CHECK_MARK):])
    if "" in problems:
        return Reason(f"its project's .venv cannot run the node host ({strip_reason(problems['']).text})", code="no_sdk",
                      fixes=(Fix("sdk", {"project": str(project)}, "installs this runtime's SDK there"),))
    if problems:
        node, problem = sorted(problems.items())[0]
        more = f" (and {counted(len(problems) - 1, 'more node')})" if len(problems) > 1 else ""
        where = f"the copy of {project} kept for it ({record.sources})" if record.sources else str(project)
        return Reason(f"node {node} ({classes[node]}) cannot be imported from {where}: {strip_reason(problem).text}{more}",
                      code="not_importable", details={"node": node, "class": classes[node], "project": str(project),
                                                      "sources": record.sources, "problem": strip_reason(problem).text,
                                                      "more": more})
    return None


class KeptLoadFailed(Exception):
    def __init__(self, name: str, reason: Reason) -> None:
        super().__init__(reason.text)
        self.name = name
        self.reason = reason
