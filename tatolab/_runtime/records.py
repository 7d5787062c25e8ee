"""Kept-stream records and the runtime marker on disk, written so that a crash or a power
cut never leaves a broken file: write a temporary file, fsync it, rename it over the old
one, fsync the folder."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tatolab._sdk.errors import AddressError
from tatolab._sdk.naming import url_safe

RECORD_VERSION = 1
_TEMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: afterwards it holds the old bytes or the new ones, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}{_TEMP_SUFFIX}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
    graph: dict[str, Any]  # the graph the stream function built at `run -d`: restarts load this
    target: str | None = None
    file: str | None = None
    stopped: bool = False
    failed: str | None = None  # the reason, while the runtime does not load it
    kept_at: str = ""

    @property
    def exposures(self) -> list[dict[str, Any]]:
        return list(self.graph.get("exposures") or [])

    @property
    def state(self) -> str:
        return "failed" if self.failed else "stopped" if self.stopped else "kept"

    def to_json(self) -> dict[str, Any]:
        # project first: a record cut short by hand still tells whose it was
        return {
            "version": RECORD_VERSION,
            "name": self.name,
            "project": self.project,
            "python": self.python,
            "target": self.target,
            "file": self.file,
            "stopped": self.stopped,
            "failed": self.failed,
            "kept_at": self.kept_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "exposures": self.exposures,
            "graph": self.graph,
        }

    @classmethod
    def from_json(cls, data: Any) -> "KeptRecord":
        """Raises ValueError naming what is wrong when ``data`` is not a whole record."""
        if not isinstance(data, dict):
            raise ValueError("it is not a JSON object")
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"its version is {data.get('version')!r}, this runtime reads version {RECORD_VERSION}")
        for key, kind in (("name", str), ("project", str), ("python", str), ("graph", dict), ("stopped", bool)):
            if not isinstance(data.get(key), kind):
                raise ValueError(f"its {key!r} is missing or not a {kind.__name__}")
        graph = data["graph"]
        if not isinstance(graph.get("nodes"), list) or not isinstance(graph.get("links"), list):
            raise ValueError("its graph has no node or link list")
        failed = data.get("failed")
        return cls(
            name=data["name"],
            project=data["project"],
            python=data["python"],
            graph=graph,
            target=data.get("target"),
            file=data.get("file"),
            stopped=data["stopped"],
            failed=str(failed) if failed else None,
            kept_at=str(data.get("kept_at") or ""),
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
    def fix(self) -> str:
        return f"`tatolab rm {self.name}` forgets it; then `tatolab run -d` in its project keeps it again"


_PROJECT_IN_TEXT = re.compile(r'"project":\s*"((?:[^"\\]|\\.)*)"')


def is_stream_name(name: str) -> bool:
    """Stream names are URL-safe; anything else (``../x``) is not one."""
    try:
        return url_safe(name) == name
    except AddressError:
        return False


class RecordStore:
    """One JSON file per kept stream in ``<state>/streams/``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str) -> Path:
        if not is_stream_name(name):  # a name from a request must never reach outside the folder
            raise ValueError(f"{name!r} is not a stream name")
        return self.folder / f"{name}.json"

    def read(self, name: str) -> KeptRecord | DamagedRecord | None:
        if not is_stream_name(name):
            return None  # no stream can have it: the caller says "no stream named ..."
        path = self.path(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return DamagedRecord(name, path, f"reading it failed: {exc.strerror}", None)
        try:
            record = KeptRecord.from_json(json.loads(raw))
        except ValueError as exc:
            text = raw.decode(errors="replace")
            found = _PROJECT_IN_TEXT.search(text)
            project = json.loads(f'"{found.group(1)}"') if found else None
            problem = f"{len(raw)} bytes, {'empty' if not raw.strip() else exc}"
            return DamagedRecord(name, path, problem, project)
        if record.name != name:
            return DamagedRecord(name, path, f"it names the stream {record.name!r}", record.project)
        return record

    def names(self) -> list[str]:
        try:
            entries = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []
        return [e[: -len(".json")] for e in entries if e.endswith(".json") and not e.startswith(".")]

    def read_all(self) -> list[KeptRecord | DamagedRecord]:
        records = [self.read(name) for name in self.names()]
        return [r for r in records if r is not None]

    def save(self, record: KeptRecord) -> None:
        write_json_atomically(self.path(record.name), record.to_json())

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
