"""The stream lifecycle as plain state: what runs under each name, and what each command does to it.

Every start (`run`, `run -d`, a `dev` reload, a kept stream from its record) is three commands:
``check`` (may refuse: nothing changes yet), ``go`` (the old version stops completely, then the
new one starts) and ``started`` or ``start_failed``. Stops, removals, a terminal that hangs up and
the runtime's own stop are one command each. Each returns the effects (effects.py) the driver
(runtime.py) carries out in order; facts only the drivers can read (a kept record, the cameras a
graph opens) come in with the command. The two-crash rule's marker (rules/crashes.py) is kept
here too: the core says what it must hold, the driver writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from tatolab._control.errors import ControlError, Fix, Reason
from tatolab._graph import Graph
from tatolab._runtime.core.effects import (Effect, Forget, LoadFailed, MarkFailed, Refuse, RefuseDamaged, Reply,
                                           RestartNodes, Say, SetStopped, Snapshot, StartNodes, Superseded, Unknown,
                                           Unload, WriteMarker, WriteRecord)
from tatolab._runtime.rules import cameras, caps, names
from tatolab._runtime.rules.cameras import CameraUse, Missing
from tatolab._runtime.rules.crashes import Lifecycle, RunState
from tatolab._runtime.rules.reload import Imported, Saved, restarts, same_shape
from tatolab._words import counted

# Why a stream ended, by the operation that ended it (the CLI words them "stopped by `tatolab stop`").
STOPPED = Reason("stopped by a stop request", code="ended_by", details={"ended": "stopped", "op": "stop"})
REMOVED = Reason("removed by an rm request", code="ended_by", details={"ended": "removed", "op": "rm"})
REPLACED_BY_KEEP = Reason("replaced by a new kept load", code="ended_by",
                          details={"ended": "replaced", "op": "load", "args": {"mode": "kept"}, "new": True})
REPLACED = Reason("replaced by a new version")
RUNTIME_STOPPED = Reason("the runtime stopped")
ENDED_KEPT = 256  # how many ended versions' reasons are remembered (for "stopped meanwhile")

# How a start came: `run` or a dev reload (attached), `run -d` (keep), a kept stream from its record.
ATTACHED, KEEP, RECORD = "attached", "keep", "record"


@dataclass(frozen=True)
class Held:
    """The kept record under a name, as storage read it."""

    project: str | None
    state: str  # kept | stopped | failed
    damaged: bool = False


@dataclass
class Version:
    """One version of a stream, under its name: started once, stopped once."""

    id: int  # the driver's (a loaded stream's instance number)
    name: str
    project: str
    mode: str  # attached | kept
    nodes: int
    cameras: tuple[CameraUse, ...] = ()  # the cameras its nodes open
    phase: str = "starting"  # starting | running
    since_ns: int = 0  # when it entered its phase
    graph: Graph | None = None  # as it runs now (a dev reload in place compares the next one with it)


@dataclass(frozen=True)
class Ref:
    """A version as its caller saw it: the name and which version."""

    name: str
    id: int


@dataclass(frozen=True)
class Load:
    """A start: ``version`` under its name, in place of ``replacing`` (or, from a kept stream's
    project, the running kept stream of that name)."""

    version: Version
    how: str = ATTACHED  # ATTACHED | KEEP | RECORD
    record: Held | None = None  # the record under its name now
    missing: tuple[Missing, ...] = ()  # cameras it asks for that are not here
    replacing: Ref | None = None  # stops completely before ``version`` starts
    reason: Reason = REPLACED  # why ``replacing`` stops
    kept_project: str | None = None  # RECORD: the record's project when its start was asked
    problem: Reason | None = None  # RECORD: why it cannot load from its record (kept.preflight)
    devices_may_come: bool = False  # RECORD at the runtime's start: a camera not there yet is waited for

    @property
    def keeping_from(self) -> str | None:
        """`run -d` and a kept stream's start: its own record and running kept stream yield to it."""
        return self.version.project if self.how in (KEEP, RECORD) else None


@dataclass
class _Pending:
    load: Load
    old: Version | None


@dataclass
class Streams:
    """What runs under each name, the starts in progress, and the marker's state."""

    running: dict[str, Version] = field(default_factory=dict)
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle(RunState()))
    closing: bool = False
    pending: dict[int, _Pending] = field(default_factory=dict)  # checked, not yet started
    ended: dict[int, Reason] = field(default_factory=dict)  # why recent versions ended

    # -- the runtime's start and stop --------------------------------------------------------

    def began(self, state: RunState) -> None:
        """The two-crash rule decided at the runtime's start (kept.py reads and writes the marker)."""
        self.lifecycle = Lifecycle(state)

    def stopped_cleanly(self) -> list[Effect]:
        self.lifecycle.stopped_cleanly()
        return [WriteMarker(self.lifecycle.state.to_json(), clean=True)]

    def shutdown(self) -> list[Effect]:
        """The runtime stops: no start after this, and every running version stops."""
        self.closing = True
        return [self._unload(v, RUNTIME_STOPPED, by_runtime=True) for v in list(self.running.values())]

    def at_start(self, records: dict[str, Held]) -> list[str]:
        """The kept streams to load as the runtime starts, one at a time: neither stopped nor failed."""
        return [name for name, held in records.items() if not held.damaged and held.state == "kept"]

    # -- starting ----------------------------------------------------------------------------

    def check(self, load: Load) -> list[Effect]:
        """Whether ``load`` may start: refused (nothing changes), superseded, or checked (then ``go``).
        The name is checked before anything stops, so a refused start leaves the old version running."""
        name, new = load.version.name, load.version
        if self.closing:
            return [Refuse(ControlError("the runtime is stopping"))]
        if load.how == RECORD:
            held = load.record
            if held is None or held.damaged or held.state == "stopped" or held.project != load.kept_project:
                return [Superseded(None)]  # stopped, removed or replaced while it was being checked
            if name in self.running:
                return [Superseded(self.running[name].id)]
            if load.problem is not None:
                return [MarkFailed(name, load.problem), LoadFailed(name, load.problem)]
        old = None
        if load.replacing is not None:
            old = self._current(load.replacing)
            if old is None:
                return [Refuse(self.stopped_meanwhile(load.replacing))]
        held_now = self.running.get(name)
        if old is None and held_now is not None and held_now.mode == "kept" and held_now.project == load.keeping_from:
            old = held_now  # `run -d` again from its project: the running kept stream yields
        record = load.record
        refused = names.refusal(
            name,
            record=None if record is None else names.Recorded(project=str(record.project), damaged=record.damaged,
                                                              state=record.state),
            loaded=None if held_now is None or held_now is old else names.Loaded(held_now.project, held_now.mode),
            keeping_from=load.keeping_from,
        )
        refused = refused or self.caps_refusal(name, new.nodes, replacing=old)
        refused = refused or self.cameras_refusal(name, new.cameras, () if load.devices_may_come else load.missing,
                                                  replacing=old)
        if refused is not None:
            return [Refuse(refused)]
        self.pending[new.id] = _Pending(load, old)
        return [Snapshot(new.id)] if load.how == KEEP else []

    def abandon(self, version: int) -> None:
        """A start that did not go on (refused, its copy of sources not made, or cut short by an error):
        nothing of it stays. After ``started`` or ``start_failed`` there is nothing left to drop."""
        if version in self.pending:
            self._drop(version)

    def go(self, version: int, now_ns: int) -> list[Effect]:
        """The checked start goes on: the old version stops completely, then (`run -d`: once its
        record is written) the new one starts."""
        pending = self.pending[version]
        load, new = pending.load, pending.load.version
        effects: list[Effect] = []
        if pending.old is not None and self.running.get(pending.old.name) is pending.old:
            effects.append(self._unload(pending.old, load.reason))
        elif load.replacing is not None:  # stopped between its check and now
            del self.pending[version]
            return [Refuse(self.stopped_meanwhile(load.replacing))]
        if load.how == KEEP:  # a new record: no crash of the one it replaces is held against it
            self.lifecycle.forget(new.name)
            self.lifecycle.loading(new.name)
            effects += [self._marker(), WriteRecord(new.id)]
        new.phase, new.since_ns = "starting", now_ns
        self.running[new.name] = new
        effects.append(StartNodes(new.id))
        return effects

    def record_unwritten(self, version: int) -> list[Effect]:
        """`run -d`'s record could not be written: the new version does not start."""
        load = self._drop(version)
        return self._not_loading(load.version.name)

    def start_failed(self, version: int, reason: Reason) -> list[Effect]:
        """Its rings could not be made, or its graph not wired: nothing of it started."""
        load = self._drop(version)
        name = load.version.name
        if load.how == KEEP:  # recorded, but not running: say so
            return [*self._not_loading(name), MarkFailed(name, reason)]
        if load.how == RECORD:
            return [MarkFailed(name, reason), LoadFailed(name, reason)]
        return []

    def started(self, version: int, now_ns: int, *, at_runtime_start: bool = False) -> list[Effect]:
        """Its nodes started."""
        load = self.pending.pop(version)
        new = load.load.version
        new.phase, new.since_ns = "running", now_ns
        if load.load.how == ATTACHED:
            return []
        self.lifecycle.loaded(new.name)
        effects: list[Effect] = [self._marker()]
        if at_runtime_start:
            effects.append(Say("info", f"kept stream {new.name} loaded from its record "
                                       f"({counted(new.nodes, 'node')}, project {new.project})", {"stream": new.name}))
        return effects

    # -- a kept stream from its record (`tatolab start`, the runtime's start) ----------------

    def start(self, name: str, record: Held | None) -> list[Effect]:
        """`tatolab start`: a stopped kept stream starts (a failed one is retried); then ``loading``."""
        loaded = self.running.get(name)
        if record is None:
            if loaded is not None:
                return [Refuse(ControlError(f"{name} is {loaded.mode} and already running; "
                                            "only kept streams are started"))]
            return [Unknown(name)]
        if record.damaged:
            return [RefuseDamaged(name, "started")]
        if loaded is not None:
            return [Reply(loaded.id)]
        return [SetStopped(name, False)]

    def loading(self, name: str) -> list[Effect]:
        """A kept stream's start from its record begins (checked first, outside the load lock): the
        marker says so before any of its work runs in the runtime's process."""
        if name in self.running:
            return [Reply(self.running[name].id)]
        self.lifecycle.loading(name)
        return [self._marker()]

    def loading_done(self, name: str) -> list[Effect]:
        return self._not_loading(name)

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, name: str, record: Held | None, reason: Reason = STOPPED) -> list[Effect]:
        """Unload a stream; a kept one is recorded as stopped first, so it stays stopped across restarts."""
        if record is not None and record.damaged:
            return [RefuseDamaged(name, "stopped")]
        loaded = self.running.get(name)
        if record is None and loaded is None:
            return [Unknown(name)]
        effects: list[Effect] = []
        if record is not None:
            effects.append(SetStopped(name, True))
        if loaded is not None:
            effects.append(self._unload(loaded, reason))
            if name in self.lifecycle.state.loading | self.lifecycle.state.loaded:
                self.lifecycle.unloaded(name)
                effects.append(self._marker())
        return [*effects, Reply({"name": name, "state": "stopped", "kept": record is not None})]

    def remove(self, name: str, record: Held | None) -> list[Effect]:
        """Forget a stream: unload it, and remove its kept record and copy of sources."""
        loaded = self.running.get(name)
        if record is None and loaded is None:
            return [Unknown(name)]
        effects: list[Effect] = []
        if record is not None and not record.damaged:
            effects.append(SetStopped(name, True))  # a crash before the record is gone leaves it stopped, not back
        if loaded is not None:
            effects.append(self._unload(loaded, REMOVED))
        if record is not None:
            self.lifecycle.forget(name)
            effects += [Forget(name), self._marker()]
        project = record.project if record is not None else loaded.project if loaded is not None else None
        return [*effects, Reply({"name": name, "forgotten": record is not None, "project": project})]

    def detach(self, ref: Ref, reason: Reason) -> list[Effect]:
        """Its terminal hung up (`run`, `dev`): unload that version unless it was replaced or stopped."""
        current = self._current(ref)
        return [] if current is None else [self._unload(current, reason)]

    # -- a running stream changed in place ---------------------------------------------------

    def live(self, name: str, record: Held | None) -> list[Effect]:
        """The running stream a live change applies to, or the refusal (stopped, or no such stream)."""
        loaded = self.running.get(name)
        if loaded is not None:
            return [Reply(loaded.id)]
        if record is not None and not record.damaged:
            return [Refuse(ControlError(
                f"stream {name} is not running ({record.state}); a live change applies to a running stream",
                code="not_running", fixes=[Fix("start", {"name": name}, "start it first")],
                details={"stream": name}))]
        return [Unknown(name)]

    def in_place(self, ref: Ref | None, new: Graph) -> bool:
        """A dev reload: whether ``new`` replaces the running version node by node (it still runs, and the
        new graph has its name and shape: rules/reload.py), else it is a whole new version."""
        current = None if ref is None else self._current(ref)
        if current is None or current.graph is None or new["stream"] != current.name:
            return False
        return same_shape(current.graph, new)

    def reload(self, ref: Ref, new: Graph, saved: Iterable[Saved], imports: dict[str, Imported | None],
               uses: Iterable[CameraUse], missing: Iterable[Missing]) -> list[Effect]:
        """A dev reload in place, given the files saved since the running version loaded and what each
        node's process imported (in node order): restart the nodes that may run changed code or config."""
        if self.closing:
            return [Refuse(ControlError("the runtime is stopping"))]
        current = self._current(ref)
        if current is None:
            return [Refuse(self.stopped_meanwhile(ref))]
        refused = self.cameras_refusal(ref.name, tuple(uses), tuple(missing), replacing=current)
        if refused is not None:
            return [Refuse(refused)]
        why = restarts(current.graph or new, new, saved, imports)
        current.cameras, current.graph = tuple(uses), new
        return [RestartNodes(current.id, why, [name for name in imports if name not in why])]

    def reshaped(self, name: str, graph: Graph, uses: Iterable[CameraUse]) -> None:
        """A live change (add_node, remove_node...) changed its graph."""
        if name in self.running:
            current = self.running[name]
            current.graph, current.nodes, current.cameras = graph, len(graph["nodes"]), tuple(uses)

    # -- the rules, against what runs ----------------------------------------------------------

    def caps_refusal(self, name: str, nodes: int, *, replacing: Version | None = None,
                     adding: str | None = None) -> ControlError | None:
        """A stream (or a node added live) past the node caps (rules/caps.py)."""
        others = sum(v.nodes for v in self.running.values() if v is not replacing and v.name != name)
        return caps.refusal(name, nodes, others, adding=adding)

    def cameras_refusal(self, name: str, uses: tuple[CameraUse, ...], missing: tuple[Missing, ...], *,
                        replacing: Version | None = None) -> ControlError | None:
        """A stream whose camera another stream holds, or that names no camera here (rules/cameras.py)."""
        if not uses and not missing:
            return None
        held = [use for v in self.running.values() if v is not replacing and v.name != name for use in v.cameras]
        return cameras.refusal(name, list(uses), list(missing), held)

    def stopped_meanwhile(self, ref: Ref) -> ControlError:
        why = self.ended.get(ref.id) or Reason("unloaded")
        return ControlError(f"{ref.name} was stopped meanwhile ({why.text})", code="stopped_meanwhile",
                            details={"name": ref.name, "why": why.to_wire()})

    # -- inside ------------------------------------------------------------------------------

    def _current(self, ref: Ref) -> Version | None:
        current = self.running.get(ref.name)
        return current if current is not None and current.id == ref.id else None

    def _unload(self, version: Version, reason: Reason, *, by_runtime: bool = False) -> Unload:
        if self.running.get(version.name) is version:
            del self.running[version.name]
        self.ended[version.id] = reason
        while len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]
        return Unload(version.id, reason, by_runtime)

    def _drop(self, version: int) -> Load:
        load = self.pending.pop(version).load
        if self.running.get(load.version.name) is load.version:
            del self.running[load.version.name]
        return load

    def _not_loading(self, name: str) -> list[Effect]:
        if name not in self.lifecycle.state.loading:
            return []
        self.lifecycle.not_loading(name)
        return [self._marker()]

    def _marker(self) -> WriteMarker:
        return WriteMarker(self.lifecycle.state.to_json())
