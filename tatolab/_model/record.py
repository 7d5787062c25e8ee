"""The kept record: what the runtime keeps of a stream handed to it with ``tatolab run -d``, one
JSON file per stream in ``<state>/streams/`` (tatolab/_runtime/stored/records.py writes and reads it).

A versioned msgspec Struct: ``read_record`` is its one decode. A file of another version, or one
whose shape does not fit (a hand edit, a file cut short), is a ``RecordProblem`` naming the
field, which the store reports as a damaged record with its fixes, never a crash. The fields
are in the order files have always had (name and project first: a record cut short by hand
still tells whose it was); a record written by this version's first release reads unchanged.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec

from tatolab._model.fit import fit_problem
from tatolab._model.graph import Exposure, Graph, GraphProblem, check_graph

RECORD_VERSION = 1


class RecordFix(TypedDict, total=False):
    op: str  # the operation that fixes it
    args: dict[str, Any]
    does: str


class RecordReason(TypedDict, total=False):
    """Why a kept stream is not loaded (tatolab/_control/errors.py's Reason.to_wire)."""

    text: str
    code: str | None
    details: dict[str, Any] | None
    fixes: list[RecordFix] | None


class RecordFile(msgspec.Struct, kw_only=True):
    version: int
    name: str
    project: str
    python: str  # the project's interpreter, which node processes start from
    target: str | None = None
    file: str | None = None
    stopped: bool
    failed: RecordReason | str | None = None  # plain text in records written before reasons had fixes
    kept_at: str | None = ""
    exposures: list[Exposure] = []  # the graph's, repeated for a reader of the file (the graph's are used)
    sources: str | None = None  # the snapshot of the project's modules its nodes import (None: the live files)
    env: dict[str, str] | None = None  # the environment of the `run -d` command (None: the runtime's)
    graph: Graph  # the graph the stream function built at `run -d`: restarts load this


class RecordProblem(ValueError):
    """Why a record file cannot be read, worded after "its record ... is damaged and cannot be read"."""


def read_record(data: object) -> RecordFile:
    """``data`` (a record file's JSON) as a RecordFile, or RecordProblem naming what does not fit."""
    if not isinstance(data, dict):
        raise RecordProblem("it is not a JSON object")
    if data.get("version") != RECORD_VERSION:
        raise RecordProblem(f"its version is {data.get('version')!r}, this runtime reads version {RECORD_VERSION}")
    if "graph" in data:
        try:
            check_graph(data["graph"])  # first: its words name the node, port or link
        except GraphProblem as exc:
            raise RecordProblem(f"its graph {exc}") from None
    try:
        record = msgspec.convert(data, RecordFile)
    except msgspec.ValidationError as exc:
        raise RecordProblem(f"its {fit_problem(exc)}" if " - at `$." in str(exc) else fit_problem(exc)) from None
    record.graph = data["graph"]  # the graph as written: keys a TypedDict does not name are kept, not dropped
    return record
