"""Recording before and after a trigger (``tatolab record ... --before 30s --after 10s --on ADDRESS``).

Every message the recorder makes goes into a ring in memory holding the last ``before`` seconds
(and never more than ``max_bytes``: the oldest go first, whatever the rate). A trigger at t opens
a numbered file (``out-1.mcap``, ``out-2.mcap``...) with what the ring holds from t - before, then
what comes, until t + after; a trigger while a window is open extends it to its own t + after; a
trigger after a window closed opens the next file, which may hold bags the last one held too.
Each file is finished and indexed when its window closes. An H.264 channel's messages in a file
start at its first keyframe (a player decodes from there; a keyframe comes every second).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tatolab._recorder import compressed
from tatolab._recorder.file import McapFile

CLOSE_GRACE_NS = 500_000_000  # a window is closed this long after its end (bags read late still get in)
ITEM_OVERHEAD = 200  # bytes counted per message beside its data (the ring's own bookkeeping)


@dataclass
class Item:
    address: str
    kind: str
    first_bags: list[Any]  # a JSON channel's schema sample
    data: bytes
    log_ns: int  # Unix clock
    publish_ns: int  # Unix clock (the bag's origin)
    sequence: int
    t_ns: int  # monotonic: when it was written to its ring


def numbered(path: Path, number: int, compression: str) -> McapFile:
    """``path``'s ``number``th file, made: ``out-1.mcap``... or the next free number after it, each
    tried by ``_safe_fs.create_new_file`` (O_EXCL: none is overwritten, no name checked then opened)."""
    suffix = path.suffix or ".mcap"

    def names(_: str, n: int) -> str:
        return f"{path.stem}-{number + n}{suffix}"

    return McapFile(path.with_name(names("", 0)), compression=compression, names=names)


class Windows:
    def __init__(self, path: Path, compression: str, before_s: float, after_s: float, max_bytes: int,
                 to_wall: int, opened: Callable[[McapFile], None] = lambda f: None) -> None:
        self.path, self.compression = path, compression
        self.before_ns, self.after_ns = int(before_s * 1e9), int(after_s * 1e9)
        self.max_bytes = max_bytes
        self.to_wall = to_wall
        self.opened = opened
        self.ring: deque[Item] = deque()
        self.bytes = 0
        self.trimmed_by_size = 0  # messages dropped from the ring for max_bytes before their time
        self.file: McapFile | None = None
        self.ids: dict[str, int] = {}
        self.start_ns = self.end_ns = 0
        self.triggers = 0
        self.number = 0
        self.files: list[dict[str, Any]] = []
        self._bags = 0

    def add(self, item: Item) -> None:
        self.ring.append(item)
        self.bytes += len(item.data) + ITEM_OVERHEAD
        self._trim(item.t_ns)
        if self.file is not None and self.start_ns <= item.t_ns <= self.end_ns:
            self._write(item)

    def _trim(self, newest_ns: int) -> None:
        keep_from = newest_ns - self.before_ns - 1_000_000_000  # a second more than asked: the span is whole
        while self.ring and (self.ring[0].t_ns < keep_from or self.bytes > self.max_bytes):
            old = self.ring.popleft()
            self.bytes -= len(old.data) + ITEM_OVERHEAD
            if old.t_ns >= keep_from:
                self.trimmed_by_size += 1

    def trigger(self, t_ns: int) -> None:
        """A trigger at monotonic ``t_ns``."""
        self.triggers += 1
        if self.file is not None and t_ns <= self.end_ns:
            self.end_ns = max(self.end_ns, t_ns + self.after_ns)
            self.files[-1]["triggers"] += 1
            self.files[-1]["to_ns"] = self.end_ns + self.to_wall
            return
        self.close()
        self.number += 1
        self.file = numbered(self.path, self.number, self.compression)
        path = self.file.path
        self.number = int(path.stem.rsplit("-", 1)[1])  # a number taken by another file was passed over
        self.opened(self.file)
        self.ids, self._bags = {}, 0
        self.start_ns, self.end_ns = t_ns - self.before_ns, t_ns + self.after_ns
        self.files.append({"path": str(path), "trigger_ns": t_ns + self.to_wall, "from_ns": self.start_ns + self.to_wall,
                           "to_ns": self.end_ns + self.to_wall, "triggers": 1, "bags": 0, "state": "writing",
                           "cut_by_max_mb": bool(self.ring and self.ring[0].t_ns > self.start_ns
                                                 and self.trimmed_by_size)})
        for item in list(self.ring):
            if self.start_ns <= item.t_ns <= self.end_ns:
                self._write(item)

    def tick(self, now_ns: int) -> None:
        if self.file is not None and now_ns > self.end_ns + CLOSE_GRACE_NS:
            self.close()

    def _write(self, item: Item) -> None:
        assert self.file is not None
        channel_id = self.ids.get(item.address)
        if channel_id is None:
            if item.kind == "compressed" and not compressed.keyframe_of(item.data):
                return  # this file's video starts at a keyframe
            channel_id = self.ids[item.address] = self.file.channel(item.address, item.kind, item.first_bags)
        self.file.add(channel_id, item.log_ns, item.publish_ns, item.data, item.sequence)
        self._bags += 1
        self.files[-1]["bags"] = self._bags

    def close(self) -> None:
        """Finish the open file (indexed), if any."""
        if self.file is None:
            return
        file, self.file = self.file, None
        file.finish()
        self.files[-1]["state"] = "done"
        self.files[-1]["bytes"] = file.size

    @property
    def size(self) -> int:
        return sum(f.get("bytes", 0) for f in self.files) + (self.file.size if self.file is not None else 0)

    def state(self) -> dict[str, Any]:
        """The ring's memory and the files so far (progress, `graph`)."""
        span = (self.ring[-1].t_ns - self.ring[0].t_ns) / 1e9 if len(self.ring) > 1 else 0.0
        return {"ring": {"bytes": self.bytes, "max_bytes": self.max_bytes, "messages": len(self.ring),
                         "seconds": round(span, 3), "before_s": self.before_ns / 1e9, "after_s": self.after_ns / 1e9,
                         "trimmed_by_size": self.trimmed_by_size, "triggers": self.triggers},
                "files": [dict(f) for f in self.files]}


def now_ns() -> int:
    return time.monotonic_ns()
