"""Recordings in progress, marked in the state folder, so a runtime that dies mid-recording (kill -9,
a crash, a power cut) leaves a trace: the next runtime lists each as ``cut``, with its file and how
far that file can be read, and says so in its log. A recording that ends while its runtime lives
removes its mark.

One file, ``recordings-in-progress.json`` (0600, replaced whole), holding {id: {path, addresses,
started, files}} (``files``: the numbered files a split or before/after recording opened); the
runtime's loop alone writes it. A cut recording is listed with, per file, where a reader of it
stops (``reading.cut_point``: its whole chunks, their messages, the last message's time).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tatolab._safe_fs import open_own_file, write_private_file

MARKS_FILE = "recordings-in-progress.json"


class RecordingMarks:
    def __init__(self, state: Path) -> None:
        self.path = state / MARKS_FILE
        self.marks: dict[str, dict[str, Any]] = {}

    def left_behind(self) -> list[dict[str, Any]]:
        """The previous runtime's marks (its recordings it never saw end), then forgotten: call once, at start."""
        try:
            fd = open_own_file(self.path, os.O_RDONLY, "the runtime's recordings in progress")
        except OSError:
            return []
        with os.fdopen(fd, "rb") as f:
            try:
                found = json.loads(f.read())
            except ValueError:
                found = {}
        self._save()
        if not isinstance(found, dict):
            return []
        return [{"id": str(key), **value} for key, value in found.items()
                if isinstance(value, dict) and isinstance(value.get("path"), str)]

    def add(self, id: str, path: str, addresses: list[str]) -> None:
        self.marks[id] = {"path": path, "addresses": list(addresses), "started": time.time()}
        self._save()

    def files(self, id: str, paths: list[str]) -> None:
        """The numbered files (split, before/after triggers) recording ``id`` has opened so far."""
        mark = self.marks.get(id)
        if mark is not None and mark.get("files", []) != paths:
            mark["files"] = list(paths)
            self._save()

    def remove(self, id: str) -> None:
        if self.marks.pop(id, None) is not None:
            self._save()

    def _save(self) -> None:
        try:
            write_private_file(self.path, json.dumps(self.marks).encode(), "the runtime's recordings in progress")
        except OSError:
            pass  # a full disk: the mark is lost, the recording itself goes on


def files_of(mark: dict[str, Any]) -> list[str]:
    """The file a recording wrote, or (split, before/after triggers) its numbered ones
    (``out-1.mcap``...): those its mark names, and any written since it started that the runtime
    died before marking."""
    path, started = mark["path"], float(mark.get("started") or 0)
    named = [str(p) for p in mark.get("files") or [] if isinstance(p, str)]
    out = Path(path)
    if not named and out.exists():
        return [path]
    try:
        found = [str(p) for p in out.parent.glob(f"{out.stem}-*{out.suffix}")
                 if p.stem[len(out.stem) + 1:].isdigit() and p.stat().st_mtime >= started]
    except OSError:
        found = []
    return sorted(set(named) | set(found), key=_number)


def _number(path: str) -> int:
    """``out-12.mcap``: 12 (0 for a name without a number)."""
    tail = Path(path).stem.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class CutRecording:
    """A recording the previous runtime died with: listed (state ``ended``, reason ``cut``) like one
    that ended here, so `tatolab record --list` and `recordings` show it with its file."""

    state = "ended"

    def __init__(self, mark: dict[str, Any]) -> None:
        self.id = mark["id"]
        self.path = mark["path"]
        self.addresses = [str(a) for a in mark.get("addresses") or []]
        self.started = float(mark.get("started") or 0)
        from tatolab._recorder.reading import cut_point

        # where each file ends for a reader (its whole chunks, read through the bounded reader)
        self.cut = [cut_point(Path(p)) for p in files_of(mark)] or [cut_point(Path(self.path))]
        gone = all(c.get("missing") for c in self.cut)
        self.size = None if gone else sum(c["bytes"] for c in self.cut)
        self.indexed = not gone and all(c["indexed"] for c in self.cut if not c.get("missing"))
        ends = [c["last_ns"] for c in self.cut if c.get("last_ns")]
        self.seconds = round(max(0.0, max(ends) / 1e9 - self.started), 3) if ends and self.started else 0.0

    @property
    def said(self) -> str:
        if self.size is None:
            return "the file is gone"
        if self.indexed:
            return "its recorder finished the file"
        return "the file is readable up to its last whole chunk"

    @property
    def messages(self) -> int:
        return sum(c["messages"] for c in self.cut)

    def line(self) -> str:
        return (f"recording {self.id} of {', '.join(self.addresses)} to {self.path} was cut: the runtime "
                f"ended while it recorded (killed, or it crashed); {self.said}")

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "state": "ended", "path": self.path, "addresses": self.addresses, "pid": None,
                "seconds": self.seconds, "bytes": self.size or 0,
                "channels": {a: {"kind": None, "bags": 0, "dropped": 0, "bytes": 0} for a in self.addresses},
                "bags": self.messages, "dropped": 0, "reason": "cut", "indexed": self.indexed,
                "earlier_run": True, "cut": self.cut,
                "error": f"the runtime ended while it recorded; {self.said}"}
