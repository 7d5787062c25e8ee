"""Kept-stream records and the runtime marker on disk, written so that a crash or a power
cut never leaves a broken file: write a temporary file, fsync it, rename it over the old
one, fsync the folder."""

from __future__ import annotations

import copy
import json
import os
import re
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tatolab._graph import Exposure, Graph
from tatolab._model.graph import is_stream_name
from tatolab._model.record import RECORD_VERSION, RecordFile, RecordReason, read_record
from tatolab._safe_fs import create_private_file, private_dir
from tatolab._control.errors import ControlError, Fix, Reason
from tatolab._words import counted

_TEMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: afterwards it holds the old bytes or the new ones, never a mix."""
    private_dir(path.parent, "the runtime's state folder")
    temp = path.with_name(f".{path.name}.{os.getpid()}{_TEMP_SUFFIX}")
    fd = create_private_file(temp, "a record's temporary file", os.O_WRONLY)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        temp.unlink(missing_ok=True)  # a full disk: the old file stays, and no half-written temporary
        raise
    os.replace(temp, path)
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: Path, value: Any) -> None:
    write_atomically(path, (json.dumps(value, indent=1) + "\n").encode())


@dataclass
class KeptRecord:
    """What the runtime keeps of a stream handed to it with ``tatolab run -d``."""

    name: str
    project: str
    python: str  # the project's interpreter, which node processes start from
    graph: Graph  # the graph the stream function built at `run -d`: restarts load this
    target: str | None = None
    file: str | None = None
    stopped: bool = False
    failed: Reason | None = None  # why, while the runtime does not load it
    kept_at: str = ""
    env: dict[str, str] | None = None  # the environment of the `run -d` command (None: the runtime's)
    sources: str | None = None  # the snapshot of the project's modules its nodes import (None: the live files)

    @property
    def exposures(self) -> list[Exposure]:
        return list(self.graph.get("exposures") or [])

    @property
    def state(self) -> str:
        return "failed" if self.failed else "stopped" if self.stopped else "kept"

    def to_json(self) -> dict[str, Any]:
        """The record file's JSON (tatolab/_model/record.py's RecordFile)."""
        return msgspec.to_builtins(RecordFile(
            version=RECORD_VERSION,
            name=self.name,
            project=self.project,
            python=self.python,
            target=self.target,
            file=self.file,
            stopped=self.stopped,
            failed=typing.cast(RecordReason, self.failed.to_wire()) if self.failed else None,
            kept_at=self.kept_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            exposures=self.exposures,
            sources=self.sources,
            env=self.env,
            graph=self.graph,
        ))

    @classmethod
    def from_json(cls, data: Any) -> "KeptRecord":
        """Raises ValueError (RecordProblem) naming what is wrong when ``data`` is not a whole record."""
        record = read_record(data)
        return cls(
            name=record.name,
            project=record.project,
            python=record.python,
            graph=record.graph,
            target=record.target,
            file=record.file,
            stopped=record.stopped,
            failed=Reason.from_wire(record.failed) if record.failed else None,
            kept_at=record.kept_at or "",
            env=record.env,
            sources=record.sources,
        )


@dataclass
class DamagedRecord:
    """A record file that cannot be read: reported, never loaded, removed only by `tatolab rm`."""

    name: str
    path: Path
    problem: str
    project: str | None  # when the damaged text still shows it

    @property
    def reason(self) -> str:
        return f"its record {self.path} is damaged and cannot be read ({self.problem})"

    @property
    def fixes(self) -> list[Fix]:
        """Forget the damaged record, then keep the stream again from its project (the CLI words
        these as `tatolab rm <name>` and `tatolab run -d`: tatolab/_control/words.py)."""
        return [Fix("rm", {"name": self.name}, "forgets it"),
                Fix("load", {"mode": "kept", "project": self.project or "its project"}, "keeps it again")]

    def refusal(self, what: str) -> ControlError:
        """Why ``<name> cannot be <what>``, with the fixes."""
        return ControlError(f"{self.name} cannot be {what}: {self.reason}", code="damaged_record", fixes=self.fixes)


_PROJECT_IN_TEXT = re.compile(r'"project":\s*"((?:[^"\\]|\\.)*)"')


class RecordStore:
    """One JSON file per kept stream in ``<state>/streams/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # name -> (the file's stat, the record read from it): `streams` and every rewire list the
        # records, so a file is parsed again only when it changed (many kept streams, many requests)
        self._read: dict[str, tuple[tuple[int, int, int], KeptRecord]] = {}

    def path(self, name: str) -> Path:
        if not is_stream_name(name):  # a name from a request must never reach outside the folder
            raise ValueError(f"{name!r} is not a stream name")
        return self.folder / f"{name}.json"

    def read(self, name: str, *, shared: bool = False) -> KeptRecord | DamagedRecord | None:
        """The record ``name``; ``shared``: the one kept in memory, which the caller must not change."""
        if not is_stream_name(name):
            return None  # no stream can have it: the caller says "no stream named ..."
        path = self.path(name)
        try:
            with open(path, "rb") as file:
                st = os.fstat(file.fileno())
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                known = self._read.get(name)
                if known is not None and known[0] == stamp:
                    return known[1] if shared else copy.deepcopy(known[1])  # callers may change theirs
                raw = file.read()
        except FileNotFoundError:
            self._read.pop(name, None)
            return None
        except OSError as exc:
            return DamagedRecord(name, path, f"reading it failed: {exc.strerror}", None)
        self._read.pop(name, None)
        try:
            record = KeptRecord.from_json(json.loads(raw))
        except ValueError as exc:
            text = raw.decode(errors="replace")
            found = _PROJECT_IN_TEXT.search(text)
            project = json.loads(f'"{found.group(1)}"') if found else None
            problem = f"{counted(len(raw), 'byte')}, {'empty' if not raw.strip() else exc}"
            return DamagedRecord(name, path, problem, project)
        if record.name != name:
            return DamagedRecord(name, path, f"it names the stream {record.name!r}", record.project)
        self._read[name] = (stamp, record)
        return record if shared else copy.deepcopy(record)

    def names(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []
        # Hidden names (".cam") are stream names too; a temporary ends in ".tmp", never ".json".
        return [e[: -len(".json")] for e in entries if e.endswith(".json")]

    def strays(self) -> list[Path]:
        """Files named like records whose name no stream can have (a hand-made ``Cam.json``)."""
        return [self.folder / f"{name}.json" for name in self.names() if not is_stream_name(name)]

    def read_all(self, *, shared: bool = False) -> list[KeptRecord | DamagedRecord]:
        records = [self.read(name, shared=shared) for name in self.names()]
        return [r for r in records if r is not None]

    def save(self, record: KeptRecord) -> None:
        path = self.path(record.name)
        self._read.pop(record.name, None)
        write_json_atomically(path, record.to_json())
        try:
            st = os.stat(path)
        except OSError:
            return
        self._read[record.name] = ((st.st_ino, st.st_mtime_ns, st.st_size), copy.deepcopy(record))

    def remove(self, name: str) -> None:
        if not is_stream_name(name):
            return
        try:
            self.path(name).unlink()
        except FileNotFoundError:
            return
        fsync_folder(self.folder)

    def remove_leftover_temporaries(self) -> list[Path]:
        """Temporary files a crash mid-write left; the record they were replacing is intact."""
        if not self.folder.is_dir():
            return []
        left = [p for p in self.folder.iterdir() if p.name.startswith(".") and p.name.endswith(_TEMP_SUFFIX)]
        for path in left:
            path.unlink(missing_ok=True)
        return left
