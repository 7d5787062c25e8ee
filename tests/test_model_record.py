"""The kept record (tatolab/_model/record.py): a file the current format wrote reads back and writes
again byte for byte; a record of another version or shape is a damaged record naming what does
not fit, with the refusal and fixes every damaged record has, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from tatolab._control.errors import ControlError
from tatolab._model.record import RecordFile, RecordProblem, read_record
from tatolab._runtime.stored.records import DamagedRecord, KeptRecord, RecordStore

# a record file as the format before the model wrote it (KeptRecord.to_json with json.dumps(indent=1))
WRITTEN_BEFORE = json.dumps(json.loads('{"version": 1, "name": "cam", "project": "/home/u/p", "python": "/home/u/p/.venv/bin/python", "target": "stream.py:cam", "file": "stream.py", "stopped": true, "failed": {"text": "its project folder is gone", "code": "project_gone", "details": {"path": "/home/u/p"}, "fixes": [{"op": "rm", "args": {"name": "cam"}, "does": "forgets it"}]}, "kept_at": "2026-12-06T09:00:00+0000", "exposures": [{"node": "src", "port": "out", "level": "private"}], "sources": "/state/sources/cam", "env": {"A": "1"}, "graph": {"version": 1, "stream": "cam", "function": "cam", "module": "stream.py", "doc": null, "nodes": [{"name": "src", "class": "nodes.s:Source", "doc": null, "config": {"every": 2}, "execution": "continuous", "interval_ms": 10, "inputs": [], "outputs": [{"port": "out"}]}], "links": [], "exposures": [{"node": "src", "port": "out", "level": "private"}]}}'), indent=1) + "\n"


def test_a_record_file_the_format_before_wrote_loads_and_writes_again_unchanged(tmp_path: Path):
    store = RecordStore(tmp_path / "streams")
    store.folder.mkdir(mode=0o700)
    store.path("cam").write_text(WRITTEN_BEFORE)
    record = store.read("cam")
    assert isinstance(record, KeptRecord)
    assert (record.name, record.project, record.python, record.stopped) == (
        "cam", "/home/u/p", "/home/u/p/.venv/bin/python", True)
    assert (record.target, record.file, record.kept_at) == ("stream.py:cam", "stream.py", "2026-12-06T09:00:00+0000")
    assert record.env == {"A": "1"} and record.sources == "/state/sources/cam"
    assert record.failed is not None and record.failed.code == "project_gone"
    assert record.failed.fixes[0].op == "rm" and record.state == "failed"
    assert record.graph["nodes"][0]["config"] == {"every": 2}
    store.save(record)
    assert store.path("cam").read_text() == WRITTEN_BEFORE


def test_a_graph_key_the_model_does_not_name_is_kept_as_written():
    data = json.loads(WRITTEN_BEFORE)
    data["graph"]["nodes"][0]["a_later_key"] = {"x": 1}
    data["graph"]["a_later_key"] = 2
    record = KeptRecord.from_json(data)
    assert record.graph == data["graph"]
    assert record.to_json()["graph"] == data["graph"]


def test_an_older_record_with_a_text_reason_and_no_optional_keys_loads():
    data = json.loads(WRITTEN_BEFORE)
    data["failed"] = "its project folder is gone"
    for key in ("target", "file", "kept_at", "exposures", "sources", "env"):
        del data[key]
    record = KeptRecord.from_json(data)
    assert record.failed is not None and record.failed.text == "its project folder is gone"
    assert record.env is None and record.kept_at == ""


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.update({key: value})


@pytest.mark.parametrize("breakage, problem", [
    (_set("version", 2), "its version is 2, this runtime reads version 1"),
    (lambda data: data.pop("version"), "its version is None, this runtime reads version 1"),
    (lambda data: data.pop("name"), "object missing required field `name`"),
    (_set("stopped", "yes"), "its stopped: expected `bool`, got `str`"),
    (_set("env", {"A": 1}), "its env[...]: expected `str`, got `int`"),
    (_set("sources", ["/x"]), "its sources: expected `str | null`, got `array`"),
    (_set("failed", {"text": "gone", "fixes": "rm"}), "its failed.fixes: expected `array | null`, got `str`"),
    (lambda data: data["graph"]["nodes"][0].pop("outputs"), "its graph gives node src no list of outputs"),
    (lambda data: data.pop("graph"), "object missing required field `graph`"),
])
def test_a_record_of_another_version_or_shape_is_damaged_with_its_fixes(tmp_path: Path, breakage, problem):
    data = json.loads(WRITTEN_BEFORE)
    breakage(data)
    with pytest.raises(RecordProblem) as caught:
        read_record(data)
    assert problem in str(caught.value)
    store = RecordStore(tmp_path / "streams")
    store.folder.mkdir(mode=0o700)
    store.path("cam").write_text(json.dumps(data))
    damaged = store.read("cam")
    assert isinstance(damaged, DamagedRecord)
    assert problem in damaged.reason and "is damaged and cannot be read" in damaged.reason
    assert damaged.project == "/home/u/p"
    refusal = damaged.refusal("started")
    assert isinstance(refusal, ControlError) and refusal.code == "damaged_record"
    assert [fix.op for fix in refusal.fixes] == ["rm", "load"]


def test_a_record_that_is_not_an_object_is_damaged():
    with pytest.raises(RecordProblem, match="^it is not a JSON object$"):
        read_record([1])


def test_the_record_file_fields_keep_their_order_on_disk():
    assert list(RecordFile.__struct_fields__) == list(json.loads(WRITTEN_BEFORE))
