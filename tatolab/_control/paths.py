"""Where things live: the one place for each path the runtime and its clients share."""

from __future__ import annotations

from pathlib import Path

# -- a stream's log ----------------------------------------------------------------------------

LOG_FILES_KEPT = 3  # the live file plus two rotated ones: a chatty node cannot fill the disk


def stream_log(project: Path | str, stream: str) -> Path:
    """The live log file of ``stream`` loaded from ``project``."""
    return Path(project) / ".streamlib" / "logs" / f"{stream}.jsonl"


def rotated_log(path: Path, index: int) -> Path:
    """The ``index``-th older file of the log at ``path`` (``x.jsonl.1`` is the newest rotated one)."""
    return path.with_name(f"{path.name}.{index}")


def log_files(path: Path, kept: int = LOG_FILES_KEPT) -> list[Path]:
    """The log's files that exist, oldest first: ``x.jsonl.2``, ``x.jsonl.1``, ``x.jsonl``."""
    return [p for p in [rotated_log(path, i) for i in range(kept - 1, 0, -1)] + [path] if p.exists()]
