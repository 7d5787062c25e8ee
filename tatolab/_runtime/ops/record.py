"""``record_start``, ``record_watch``, ``record_stop``, ``recordings``: outputs recorded to MCAP files.

The runtime claims the readers and starts the recorder process (tatolab/_runtime/lifecycle/recordings.py);
the recorder reads the rings and writes the file, so no frame or disk work runs on the loop."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Literal, TypedDict

from tatolab._control.errors import ControlError
from tatolab._control.operations import Events
from tatolab._runtime.lifecycle import recordings as recs
from tatolab._runtime.lifecycle.recordings import RecordingRow
from tatolab._runtime.ops import op
from tatolab._runtime.ops.inspect import _find_output
from tatolab._runtime.runtime import Runtime

KEEP_ENDED = 20  # ended recordings still listed, newest first


class Progress(TypedDict):
    event: Literal["progress", "end"]
    recording: RecordingRow


def _table(runtime: Runtime) -> dict[str, recs.Recording]:
    return runtime.recordings


def _get(runtime: Runtime, id: str) -> recs.Recording:
    table = _table(runtime)
    if id not in table:
        known = ", ".join(table) or "none"
        raise ControlError(f"no recording {id}; recordings: {known}", code="unknown_recording",
                           details={"id": id})
    return table[id]


def _forget_old(table: dict[str, recs.Recording]) -> None:
    ended = [k for k, r in table.items() if r.state == "ended"]
    for key in ended[:-KEEP_ENDED]:
        del table[key]


@op("record_start")
async def record_start(
    runtime: Runtime,
    addresses: list[str],
    out: str,
    seconds: float | None = None,
    bags: int | None = None,
    compression: Literal["zstd", "lz4", "none"] = "zstd",
    profile: Literal["ordered", "newest"] = "ordered",
    start: Literal["now", "beginning"] = "now",
    confined: bool = False,
    video: Literal["auto", "h264", "raw"] = "auto",
    on: str | None = None,
    when: str | None = None,
    before: float | None = None,
    after: float | None = None,
    max_mb: float = 512.0,
    split_mb: float | None = None,
    split_seconds: float | None = None,
) -> RecordingRow:
    """Record the outputs at ``addresses`` (``<stream>/<node>/<port>``) into the MCAP file ``out``
    (an absolute path; its folder is made) until ``record_stop``, ``seconds`` or ``bags`` (in all).
    One channel per address: plain bags as JSON, frames as foxglove.RawImage, audio as
    foxglove.RawAudio. It reads like any reader (``ordered``: every bag until lapped), never slowing
    a writer, and counts what it missed; ``start="beginning"`` also takes the bags still in the rings
from before. Frames: ``video="h264"`` encodes them (in the recorder) as foxglove.CompressedVideo,
``raw`` keeps the pixels as foxglove.RawImage, ``auto`` (the default) encodes frames above 640x360;
an encoder's ``packets`` output is written as CompressedVideo as it is. Answers once the file is
open, with the recording's id.

Before and after triggers: with ``before``/``after`` (seconds) and ``on`` (the address of an output
whose bags are triggers; ``when``, an expression of a bag's keys such as ``score > 0.8``, picks
which), it keeps the last ``before`` seconds in memory (at most ``max_mb`` MB) and on each trigger
(or ``record_trigger``) writes a numbered file (``out-1.mcap``...) from ``before`` seconds before it
to ``after`` seconds after; a trigger inside an open window extends it. ``split_mb`` / ``split_seconds``:
a new numbered file each time one passes that size or length, each finished and indexed.

    The file is new (0600; missing folders made 0700): when ``out`` exists, the next free name
    (``<stem>-0001.mcap``...), which the answer's ``path`` gives; numbered files (windows, splits)
    pass over a number taken. A folder or link on the way that another user owns or could change
    is refused. ``confined`` (an agent's call over MCP): ``out`` must be inside the project of a
    stream it records, or the folder TATOLAB_RECORDINGS names."""
    if seconds is not None and seconds <= 0:
        raise ControlError(f"seconds must be above 0, not {seconds}", code="bad_value", details={"argument": "seconds"})
    if bags is not None and bags < 1:
        raise ControlError(f"bags must be 1 or more, not {bags}", code="bad_value", details={"argument": "bags"})
    table = _table(runtime)
    _forget_old(table)

    def find(address: str) -> Any:
        return _find_output(runtime, address)

    windowed = before is not None or after is not None or on is not None
    if when is not None and on is None:
        raise ControlError("when picks which bags of the trigger output (on) trigger; give on too",
                           code="bad_arguments", details={"argument": "when"})
    for name, value in (("before", before), ("after", after)):
        if value is not None and value < 0:
            raise ControlError(f"{name} must be 0 seconds or more, not {value}", code="bad_value",
                               details={"argument": name})
    for name, value in (("split_mb", split_mb), ("split_seconds", split_seconds)):
        if value is not None and value <= 0:
            raise ControlError(f"{name} must be above 0, not {value}", code="bad_value", details={"argument": name})
    if windowed and (split_mb is not None or split_seconds is not None):
        raise ControlError("before/after already writes a file per window; split_mb and split_seconds are for "
                           "a recording of everything", code="bad_arguments", details={"argument": "split_mb"})
    if max_mb <= 0:
        raise ControlError(f"max_mb must be above 0, not {max_mb}", code="bad_value", details={"argument": "max_mb"})
    options: dict[str, Any] = {  # recordings.start's options
        "seconds": seconds, "bags": bags, "compression": compression, "profile": profile, "start": start,
        "video": video, "split_mb": split_mb, "split_seconds": split_seconds}
    if windowed:
        options.update(windowed=True, before=30.0 if before is None else before, after=10.0 if after is None else after,
                       when=when, max_mb=max_mb)
    recording = await recs.start(runtime.streams, runtime.starter, table, addresses, out, options, find, confined,
                                 trigger=on)
    marks = runtime.recording_marks  # a runtime killed meanwhile leaves it listed as cut at its next start
    marks.add(recording.id, recording.path, recording.addresses)
    if recording.state == "ended":
        marks.remove(recording.id)
    else:
        recording.on_end = lambda: marks.remove(recording.id)
        recording.on_files = lambda paths: marks.files(recording.id, paths)
    return recording.row()


@op("record_watch")
async def record_watch(runtime: Runtime, id: str, stop_on_hangup: bool = False) -> Events[Progress, Progress]:
    """Follow recording ``id``: its progress twice a second, then its end with the summary.
    With ``stop_on_hangup``, the recording stops when this connection closes (the CLI's own)."""
    recording = _get(runtime, id)
    return _watch(recording, stop_on_hangup)


async def _watch(recording: recs.Recording, stop_on_hangup: bool) -> AsyncGenerator[Progress, None]:
    finished = False
    try:
        while recording.state != "ended":
            async with recording.updates:
                try:
                    await asyncio.wait_for(recording.updates.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
            if recording.state != "ended":
                yield {"event": "progress", "recording": recording.row()}
        finished = True
        yield {"event": "end", "recording": recording.row()}
    finally:
        if stop_on_hangup and not finished and recording.state != "ended":
            await recs.stop(recording)


@op("record_trigger")
async def record_trigger(runtime: Runtime, id: str) -> RecordingRow:
    """A trigger now for recording ``id`` (one started with before/after): it writes a file from
    ``before`` seconds ago to ``after`` seconds from now, or extends the window open."""
    recording = _get(runtime, id)
    recs.trigger(recording)
    return recording.row()


@op("record_stop")
async def record_stop(runtime: Runtime, id: str) -> RecordingRow:
    """Stop recording ``id``: the recorder finishes the file (last chunk, summary, index) and this
    answers with what it wrote: bags, drops and bytes per address."""
    return await recs.stop(_get(runtime, id))


@op("recordings")
async def recordings(runtime: Runtime) -> list[RecordingRow]:
    """The recordings in progress and the last ended ones, with what each wrote so far. One the
    previous runtime died with (killed, or it crashed) is listed as ended, ``reason`` ``cut``,
    ``earlier_run`` true, with ``cut``: per file, its whole chunks, messages and the last message's
    time (``last_ns``), where a reader of it stops (the file is readable as it is)."""
    return [r.row() for r in reversed(_table(runtime).values())]
