"""A stream's log: JSON Lines under ``<project>/.streamlib/logs/``, rotated by size, and
handed to whoever is watching (an attached terminal)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tatolab import _settings as settings
from tatolab import _records
from tatolab._control import paths
from tatolab._runtime.stored import unwritten
from tatolab._runtime.feed import WAITING_LIMIT, Feed
from tatolab._safe_fs import UnsafePath, open_folders_below, open_own_file

MAX_FILE_BYTES = 8 * 1024 * 1024
EARLY_RECORDS = 200  # said before an attached terminal watches; replayed to it
MAX_BYTES_ENV = "TATOLAB_LOG_MAX_BYTES"  # overrides MAX_FILE_BYTES (tests use a small limit)


def max_file_bytes() -> int:
    return settings.value(MAX_BYTES_ENV)  # checked as tatolabd started (_settings.py)


def fit_line(data: bytes, max_bytes: int) -> bytes:
    """A record line no longer than ``max_bytes``: an oversized record keeps its head, its
    message cut, and says how long it was (so one huge print cannot break the size bound)."""
    if len(data) <= max_bytes:
        return data
    try:
        record = json.loads(data)
    except ValueError:
        record = {"message": data.decode("utf-8", "replace")}
    message = str(record.get("message", ""))
    fields = {"truncated_from_bytes": len(data)}
    keep = max(0, max_bytes // 2)
    while True:
        short = {**record, "message": message[:keep] + "...", "fields": fields}
        line = (json.dumps(short, default=repr, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        if len(line) <= max_bytes:
            return line
        if keep == 0:
            bare = {k: record.get(k) for k in ("ts_ns", "time", "level", "stream")}
            bare.update(message="(a record too large for the log was left out)", fields=fields)
            return (json.dumps(bare, default=repr) + "\n").encode()
        keep //= 2


class RotatingJsonl:
    """Appends whole lines with one ``write`` each, so a hard kill never leaves half a record.

    A write that fails (a full disk, no descriptor left) is counted in ``unwritten`` and
    never raised; once writing works again, the log says how many records it lost.
    """

    def __init__(self, path: Path, max_bytes: int | None = None, kept: int = paths.LOG_FILES_KEPT,
                 below: Path | None = None) -> None:
        """``below``: the folder (a project) under which the log's folders are made and opened
        without following a link (``<project>/.streamlib/logs``: a planted link is refused)."""
        self.path = path
        self.below = below
        self._dir_fd: int | None = None
        self.max_bytes = max_bytes or max_file_bytes()
        self.kept = kept
        self._fd: int | None = None
        self._size = 0
        self.unwritten = 0  # records lost since writing last worked
        self.lost = 0  # records lost over this log's life
        self.error: str | None = None
        try:
            self._open()
        except UnsafePath:
            raise  # another user's file where ours should be: refused, never written around
        except OSError as exc:
            self._failed(exc)

    def _folder(self) -> int:
        """The log's folder, opened once: every name in it is used through this descriptor."""
        if self._dir_fd is None:
            if self.below is None:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._dir_fd = open_folders_below(self.path.parent, [], "the log's folder")
            else:
                parts = self.path.parent.relative_to(self.below).parts
                self._dir_fd = open_folders_below(
                    self.below, parts, "a folder of the stream's log",
                    "Remove it (with `rm`, which removes a link itself, not what it points to) and start the stream again.")
        return self._dir_fd

    def _open(self, truncate: bool = False) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        self._fd = open_own_file(self.path.name, flags, "a log file", dir_fd=self._folder())  # user-only
        self._size = os.fstat(self._fd).st_size

    def write(self, line: str) -> bool:
        """Append ``line``; False when it could not be written (counted, never raised)."""
        data = line.encode("utf-8", "replace")
        if not data.endswith(b"\n"):
            data += b"\n"
        data = fit_line(data, self.max_bytes)
        try:
            if self._fd is None:
                self._open()
            if self.unwritten:
                data = self._lost_line() + data
            if self._size + len(data) > self.max_bytes and self._size > 0:
                self._rotate()
            self._append(data)
        except OSError as exc:
            self._failed(exc)
            return False
        if self.unwritten:
            self.unwritten = 0
            self.error = None
            unwritten.worked(self.path)
        return True

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        written = os.write(self._fd, data)
        if written < len(data):  # the disk filled mid-line: take the half line back
            try:
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            except OSError:
                pass
            raise OSError(28, os.strerror(28))
        self._size += written

    def _lost_line(self) -> bytes:
        record = _records.make_record(
            f"{self.unwritten} record(s) could not be written to this log ({self.error})",
            level="warning", fields={"unwritten": self.unwritten},
        )
        return (_records.dumps(record) + "\n").encode()

    def _failed(self, exc: OSError) -> None:
        self.unwritten += 1
        self.lost += 1
        self.error = unwritten.reason(exc)
        unwritten.failed(self.path, exc)

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        folder = self._folder()
        for index in range(self.kept - 1, 0, -1):
            older = paths.rotated_log(self.path, index).name
            newer = self.path.name if index == 1 else paths.rotated_log(self.path, index - 1).name
            try:
                os.replace(newer, older, src_dir_fd=folder, dst_dir_fd=folder)
            except FileNotFoundError:
                pass
        self._open(truncate=True)

    def close(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._dir_fd = None


class StreamLog:
    def __init__(self, stream: str, project: Path | None) -> None:
        self.stream = stream
        self.file = RotatingJsonl(paths.stream_log(project, stream), below=Path(project)) if project else None
        self._watchers: list[Feed[dict[str, Any]]] = []
        # what was said before the first watcher came (load-time warnings), replayed to it
        self._early: list[dict[str, Any]] | None = []

    def emit(self, record: dict[str, Any]) -> None:
        record.setdefault("stream", self.stream)
        if self.file is not None:
            self.file.write(_records.dumps(record))
        for queue in self._watchers:
            queue.put_nowait(record)
        if self._early is not None and len(self._early) < EARLY_RECORDS:
            self._early.append(record)

    def say(self, message: str, *, level: str = "info", node: str | None = None, **fields: Any) -> None:
        self.emit(_records.make_record(message, level=level, stream=self.stream, node=node, fields=fields))

    def watch(self) -> Feed[dict[str, Any]]:
        """A bounded feed of this log's records for one client (see feed.py)."""
        queue = Feed(self.gap_record)
        for record in self._early or ():
            queue.put_nowait(record)
        self._early = None
        self._watchers.append(queue)
        return queue

    def gap_record(self, count: int) -> dict[str, Any]:
        """Said to a client in place of the records it was too slow to take."""
        where = f" (all are in {self.file.path})" if self.file is not None else ""
        return _records.make_record(
            f"{count} log record(s) dropped here: this terminal reads more slowly than stream {self.stream} "
            f"logs, and at most {WAITING_LIMIT} wait for it{where}",
            level="warning", stream=self.stream, fields={"dropped": count},
        )

    def unwatch(self, queue: Feed[dict[str, Any]]) -> None:
        if queue in self._watchers:
            self._watchers.remove(queue)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
