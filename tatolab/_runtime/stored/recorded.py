"""The recordings this machine's runtimes made, on disk: one record per recording, written when it
starts and again when it ends. A record still saying ``recording`` after the runtime restarted is
one that was cut (``kill -9`` of ``tatolabd`` or of the machine): `tatolab record --list` says so,
and where its file ends for a reader (it is readable as it is: ../../_recorder/file.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tatolab._runtime.stored.records import write_json_atomically

KEEP = 20  # records of earlier runs kept, newest first


def _files_of(path: Path, started: float) -> list[str]:
    """The file a recording wrote, or (before/after triggers) its numbered ones made since it started."""
    if path.exists():
        return [str(path)]
    try:
        return sorted(str(p) for p in path.parent.glob(f"{path.stem}-*{path.suffix}") if p.stat().st_mtime >= started)
    except OSError:
        return []


class RecordingLog:
    def __init__(self, state: Path) -> None:
        self.folder = state / "recordings"
        self.run = f"{time.time_ns()}-{os.getpid()}"

    def _path(self, rec_id: str) -> Path:
        return self.folder / f"{self.run}-{rec_id}.json"

    def begin(self, rec_id: str, path: str, addresses: list[str]) -> None:
        write_json_atomically(self._path(rec_id), {"id": rec_id, "run": self.run, "path": path, "addresses": addresses,
                                                   "state": "recording", "started": time.time()})

    def end(self, rec_id: str, row: dict[str, Any]) -> None:
        record = self._read(self._path(rec_id)) or {"id": rec_id, "run": self.run}
        record.update(state="ended", ended=time.time(),
                      **{k: row[k] for k in ("reason", "indexed", "error", "bytes", "files") if k in row})
        write_json_atomically(self._path(rec_id), record)

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def earlier(self) -> list[dict[str, Any]]:
        """Records of earlier runs, newest first; one cut short is examined once (blocking: call it
        off the loop) and kept as ``cut`` with where its file ends."""
        from tatolab._recorder.reading import cut_point

        try:
            names = sorted((p for p in self.folder.glob("*.json") if not p.name.startswith(f"{self.run}-")),
                           key=lambda p: p.name, reverse=True)
        except OSError:
            return []
        for old in names[KEEP:]:
            old.unlink(missing_ok=True)
        out = []
        for path in names[:KEEP]:
            record = self._read(path)
            if record is None:
                continue
            if record.get("state") == "recording":
                paths = [f["path"] for f in record.get("files") or []] or _files_of(Path(record["path"]),
                                                                                 record.get("started", 0))
                record.update(state="cut", cut=[cut_point(Path(p)) for p in paths],
                              reason="the runtime ended before it finished the file")
                write_json_atomically(path, record)
            out.append(record)
        return out
