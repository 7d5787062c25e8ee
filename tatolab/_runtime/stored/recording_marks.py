"""Recordings in progress, marked in the state folder, so a runtime that dies mid-recording (kill -9,
a crash, a power cut) leaves a trace: the next runtime lists each as ``cut``, with its file and how
far that file can be read, and says so in its log. A recording that ends while its runtime lives
removes its mark.

One file, ``recordings-in-progress.json`` (0600, replaced whole), holding {id: {path, addresses,
started}}; the runtime's loop alone writes it.
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

    def remove(self, id: str) -> None:
        if self.marks.pop(id, None) is not None:
            self._save()

    def _save(self) -> None:
        try:
            write_private_file(self.path, json.dumps(self.marks).encode(), "the runtime's recordings in progress")
        except OSError:
            pass  # a full disk: the mark is lost, the recording itself goes on


def file_state(path: str) -> tuple[int | None, bool]:
    """(the file's size, or None when it is gone; whether it ends as a finished, indexed MCAP file)."""
    from tatolab._recorder.bounded import BoundedReader

    try:
        with open(path, "rb") as f:
            return os.fstat(f.fileno()).st_size, BoundedReader(f, path).footer() is not None
    except OSError:
        return None, False


class CutRecording:
    """A recording the previous runtime died with: listed (state ``ended``, reason ``cut``) like one
    that ended here, so `tatolab record --list` and `recordings` show it with its file."""

    state = "ended"

    def __init__(self, mark: dict[str, Any]) -> None:
        self.id = mark["id"]
        self.path = mark["path"]
        self.addresses = [str(a) for a in mark.get("addresses") or []]
        self.started = float(mark.get("started") or 0)
        self.size, self.indexed = file_state(self.path)
        try:
            self.seconds = round(max(0.0, os.stat(self.path).st_mtime - self.started), 3) if self.started else 0.0
        except OSError:
            self.seconds = 0.0

    @property
    def said(self) -> str:
        if self.size is None:
            return "the file is gone"
        if self.indexed:
            return "its recorder finished the file"
        return "the file is readable up to its last whole chunk"

    def line(self) -> str:
        return (f"recording {self.id} of {', '.join(self.addresses)} to {self.path} was cut: the runtime "
                f"ended while it recorded (killed, or it crashed); {self.said}")

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "state": "ended", "path": self.path, "addresses": self.addresses, "pid": None,
                "seconds": self.seconds, "bytes": self.size or 0,
                "channels": {a: {"kind": None, "bags": 0, "dropped": 0, "bytes": 0} for a in self.addresses},
                "bags": 0, "dropped": 0, "reason": "cut", "indexed": self.indexed,
                "error": f"the runtime ended while it recorded; {self.said}"}
