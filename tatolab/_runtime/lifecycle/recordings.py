"""Recordings the runtime holds: each a recorder process (``python -m tatolab._recorder``, from
the runtime's own interpreter, like a built-in node) reading outputs through reader records the
runtime claimed, as a tap does. The runtime never touches a frame or the file itself.

A recording ends when asked (``record_stop``, or its CLI hanging up), at its seconds or bags,
when every stream it reads has stopped, when the disk is full, or with the runtime. Its reader
records are given back when its process has ended, however it ended.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Final, TypedDict

from tatolab import _settings as settings
from tatolab._control import paths
from tatolab._control.errors import ControlError
from tatolab._links.ring import RingError
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.processes.starter import ProcessStarter, Started, next_event
from tatolab._runtime.lifecycle.streams import LoadedStream, OutputRing

STOP_WAIT_S = 15.0  # a recorder finishing its file (the last chunk and the index) before it is killed
START_WAIT_S = 30.0
_ids = itertools.count(1)
# what the recorder's last progress or end adds to a row, when it says it
_FROM_LAST: Final = ("reason", "indexed", "readable", "error", "ring", "files", "cut")


class RecordingRow(TypedDict, total=False):
    id: str
    state: str  # recording | ended
    path: str
    addresses: list[str]
    pid: int | None
    seconds: float
    bytes: int
    bags: int
    dropped: int
    channels: dict[str, Any]  # per address: kind (json, video, audio), bags, dropped, bytes
    ring: dict[str, Any]  # before/after: the ring in memory (bytes, max_bytes, seconds, messages, triggers)
    files: list[dict[str, Any]]  # before/after: each file written (path, from_ns, to_ns, triggers, bags, state)
    cut: list[dict[str, Any]]  # not finished: per file, chunks, messages, first_ns, last_ns (where a reader stops)
    earlier_run: bool  # made by an earlier run of the runtime
    reason: str  # why it ended: stopped, seconds, bags, streams stopped, disk full, recorder ended
    indexed: bool  # the file has its summary and index (false: readable up to its last chunk)
    readable: bool  # false: no chunk reached the file (the disk was full before its first)
    error: str
    asked: str  # the path asked for, when a file was there: ``path`` is the next free name


@dataclass
class Reading:
    address: str
    stream: LoadedStream
    out: OutputRing
    index: int


@dataclass
class Recording:
    id: str
    path: str
    readings: list[Reading]
    options: dict[str, Any]
    started_ns: int = field(default_factory=time.monotonic_ns)
    process: Started | None = None
    state: str = "starting"  # recording | ended
    last: dict[str, Any] = field(default_factory=dict)  # the recorder's latest progress, then its end
    updates: asyncio.Condition = field(default_factory=asyncio.Condition)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task] = field(default_factory=list)
    released: bool = False
    why: str | None = None  # why the runtime stopped it, when not asked to (its streams stopped)
    asked: str = ""  # the path asked for (``path`` is the next free name when that was taken)
    on_end: Callable[[], None] | None = None  # told once it has ended (its mark for the next runtime goes)
    on_files: Callable[[list[str]], None] | None = None  # told the numbered files it has opened (its mark)
    trigger: Reading | None = None  # --on: the output whose bags trigger its windows (read, not recorded)

    @property
    def addresses(self) -> list[str]:
        return [r.address for r in self.readings]

    def row(self) -> RecordingRow:
        """What `recordings`, `graph` and `streams` say of it."""
        last = self.last
        channels = last.get("channels") or {a: {"kind": None, "bags": 0, "dropped": 0, "bytes": 0}
                                            for a in self.addresses}
        row: RecordingRow = {
            "id": self.id, "state": self.state, "path": self.path, "addresses": self.addresses,
            "pid": self.process.pid if self.process else None,
            "seconds": last.get("seconds", round((time.monotonic_ns() - self.started_ns) / 1e9, 3)),
            "bytes": last.get("bytes", 0), "channels": channels,
            "bags": sum(c["bags"] for c in channels.values()),
            "dropped": sum(c["dropped"] for c in channels.values())}
        if self.asked and self.asked != self.path:
            row["asked"] = self.asked
        for key in _FROM_LAST:
            if key in last:
                row[key] = last[key]
        if row.get("reason") == "stopped" and self.why:
            row["reason"] = self.why
        return row


def _check_path(out: str) -> Path:
    path = Path(out)
    if not path.is_absolute():
        raise ControlError(f"the recording's path must be absolute, not {out!r} (the CLI makes it so)",
                           code="bad_value", details={"argument": "out"})
    if path.is_dir():
        raise ControlError(f"{out} is a folder; give the file to write, like {out.rstrip('/')}/recording.mcap",
                           code="bad_value", details={"argument": "out"})
    return path


def _check_confined(path: Path, projects: list[Path]) -> None:
    """Refuse ``path`` unless it is (its links followed) inside one of ``projects`` or TATOLAB_RECORDINGS."""
    folders = list(dict.fromkeys(str(p) for p in projects))
    configured = settings.value("TATOLAB_RECORDINGS")
    if configured:
        folders.append(configured)
    real = Path(os.path.realpath(path.parent))
    for folder in folders:
        root = Path(os.path.realpath(folder))
        if real == root or root in real.parents:
            return
    allowed = " or ".join(folders)
    raise ControlError(f"an agent may record only inside the recorded stream's project or the folder "
                       f"TATOLAB_RECORDINGS names; {path} is in neither ({allowed}). Give a path under "
                       f"{folders[0]}, or set TATOLAB_RECORDINGS in the runtime's environment",
                       code="bad_value", details={"argument": "out", "allowed": folders})


async def start(streams: dict[str, LoadedStream], starter: ProcessStarter, recordings: dict[str, Recording],
                addresses: list[str], out: str, options: dict[str, Any],
                find: Any, confined: bool = False, trigger: str | None = None) -> Recording:
    """Claim a reader on every output (refusing, before any file is made, an address that names
    none), start the recorder and wait until it has the file open (made by ``_safe_fs.create_new_file``).

    ``confined`` (MCP): ``out`` only inside a recorded stream's project or TATOLAB_RECORDINGS."""
    if not addresses:
        raise ControlError("record needs at least one output's address (<stream>/<node>/<port>)",
                           code="bad_arguments")
    if len(set(addresses)) != len(addresses):
        raise ControlError("an address is given twice; each output is recorded once", code="bad_arguments")
    path = _check_path(out)
    found = [find(address) for address in addresses]  # raises ControlError naming the address
    on = find(trigger) if trigger is not None else None
    if confined:
        _check_confined(path, [stream.project for stream, _, _ in found])
    recording = Recording(id=f"rec-{next(_ids)}", path=str(path), readings=[], options=options, asked=str(path))
    try:
        for stream, ring, name in found:
            try:
                index = claim_reader(ring)
            except RingError as exc:
                raise ControlError(f"cannot record {name}: {exc}") from None
            recording.readings.append(Reading(name, stream, ring, index))
        if on is not None:
            stream, ring, name = on
            try:
                recording.trigger = Reading(name, stream, ring, claim_reader(ring))
            except RingError as exc:
                raise ControlError(f"cannot read the trigger {name}: {exc}") from None
        spec = {"path": str(path), "pool": paths.surface_pool(), **options,
                "sources": [{"address": r.address, "base": r.out.base, "reader": r.index} for r in recording.readings],
                "trigger": None if recording.trigger is None else {
                    "address": recording.trigger.address, "base": recording.trigger.out.base,
                    "reader": recording.trigger.index}}
        # (cwd: never the recording's folder, which is only reached through the checks of _safe_fs)
        recording.process = await starter.start(Path(sys.executable), "tatolab._recorder", [], cwd=Path("/"),
                                                env=dict(os.environ))
        assert recording.process.stdin is not None
        recording.process.stdin.write((json.dumps(spec) + "\n").encode())
        first = await asyncio.wait_for(next_event(recording.process), START_WAIT_S)
    except BaseException:
        await _end(recording)
        raise
    if first is None or first.get("event") != "recording":
        await _end(recording)
        why = (first or {}).get("error") or "the recorder ended before opening the file"
        raise ControlError(f"cannot record to {path}: {why}", code="bad_value", details={"argument": "out"})
    recording.path = str(first.get("path") or path)  # the next free name when ``out`` was taken
    recording.state = "recording"
    recordings[recording.id] = recording
    recording.tasks = [asyncio.ensure_future(_follow(recording)), asyncio.ensure_future(_streams_end(recording))]
    return recording


def skip_ids(used: str) -> None:
    """A recording id the previous runtime gave (``rec-N``, listed as cut) is not given again."""
    global _ids
    try:
        n = int(used.removeprefix("rec-"))
    except ValueError:
        return
    current = next(_ids)
    _ids = itertools.count(max(current, n + 1))


async def _follow(recording: Recording) -> None:
    assert recording.process is not None
    try:
        while (event := await next_event(recording.process)) is not None:
            if event.get("event") in ("progress", "end"):
                async with recording.updates:
                    recording.last = {k: v for k, v in event.items() if k != "event"}
                    recording.updates.notify_all()
                if recording.on_files is not None and recording.last.get("files"):
                    recording.on_files([f["path"] for f in recording.last["files"]])
        await recording.process.wait()
    finally:
        if "reason" not in recording.last:  # it ended without saying so (killed): the file ends at its last chunk
            code = recording.process.returncode
            said = await _last_words(recording.process)
            recording.last = {**recording.last, "reason": "recorder ended", "indexed": False,
                              "error": f"the recorder ended (exit {code}) before finishing the file; it is "
                                       "readable up to its last whole chunk" + (f" (it said: {said})" if said else "")}
        await _end(recording)


async def _last_words(process: Started) -> str:
    """The last line a recorder that crashed wrote on its stderr (a traceback's exception), or ""."""
    if process.stderr is None:
        return ""
    try:
        text = await asyncio.wait_for(process.stderr.read(), 2.0)
    except (asyncio.TimeoutError, OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


async def _streams_end(recording: Recording) -> None:
    """Every stream it reads has stopped: nothing more can come, so it ends."""
    streams = {id(r.stream): r.stream for r in recording.readings}.values()
    await asyncio.gather(*(s.ended.wait() for s in streams))
    recording.why = "streams stopped"
    await stop(recording)


async def _end(recording: Recording) -> None:
    if recording.released:
        return
    recording.released = True
    if recording.process is not None and recording.process.returncode is None:
        recording.process.kill()
        await recording.process.wait()
    for reading in recording.readings + ([recording.trigger] if recording.trigger is not None else []):
        release_reader(reading.out, reading.index)
    recording.state = "ended"
    if recording.last.get("indexed") is False:  # cut: where its files end for a reader
        from tatolab._recorder.reading import cut_point

        paths = [f["path"] for f in recording.last.get("files") or []] or [recording.path]
        cut = await asyncio.get_running_loop().run_in_executor(None, lambda: [cut_point(Path(p)) for p in paths])
        recording.last = {**recording.last, "cut": cut}
    current = asyncio.current_task()
    for task in recording.tasks:
        if task is not current and not task.done():
            task.cancel()  # the wait for its streams to stop, when it ended otherwise
    if recording.on_end is not None:
        recording.on_end()
    async with recording.updates:
        recording.updates.notify_all()
    recording.ended.set()


def trigger(recording: Recording) -> None:
    """A trigger now, for a recording before and after triggers (its recorder opens or extends a window)."""
    process = recording.process
    if process is None or process.returncode is not None or process.stdin is None:
        raise ControlError(f"recording {recording.id} has ended", code="recording_ended")
    if "ring" not in recording.last and not recording.options.get("windowed"):
        raise ControlError(f"recording {recording.id} records everything; a trigger is for one started with "
                           "a time before and after its triggers", code="not_windowed")
    process.stdin.write(b"trigger\n")


async def stop(recording: Recording, wait_s: float = STOP_WAIT_S) -> RecordingRow:
    """Ask the recorder to finish its file; kill it when it does not in ``wait_s``."""
    process = recording.process
    if process is not None and process.returncode is None and process.stdin is not None:
        try:
            process.stdin.write(b"stop\n")
        except (OSError, RuntimeError):
            pass
    try:
        await asyncio.wait_for(recording.ended.wait(), wait_s)
    except asyncio.TimeoutError:
        await _end(recording)
    return recording.row()


async def stop_all(recordings: dict[str, Recording]) -> None:
    await asyncio.gather(*(stop(r) for r in recordings.values() if r.state != "ended"), return_exceptions=True)
