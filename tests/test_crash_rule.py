"""The two-crash rule and kept-stream records, as plain objects: no runtime, no processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tatolab._runtime.rules.crashes import (
    WHILE_LOADING,
    Lifecycle,
    RunState,
    involved_in_crash,
    start_run,
)
from tatolab._runtime.stored.records import DamagedRecord, KeptRecord, RecordStore, write_atomically

KEPT = {"a", "b", "c"}


def crashed(loaded: set[str] = frozenset(), loading: set[str] = frozenset(), streaks=None) -> RunState:
    return RunState(clean=False, pid=41, loaded=set(loaded), loading=set(loading), streaks=dict(streaks or {}))


def run_and_crash(previous: RunState | None, *, loaded=(), loading=()) -> tuple[RunState, dict[str, str]]:
    """Start a runtime after ``previous``, then crash it with ``loaded``/``loading``; returns its marker."""
    verdict = start_run(previous, 42, KEPT)
    life = Lifecycle(verdict.state)
    for name in loaded:
        life.loading(name)
        life.loaded(name)
    for name in loading:
        life.loading(name)
    return life.state, verdict.failed


def test_first_start_and_a_clean_stop_are_not_crashes():
    assert start_run(None, 1, KEPT).crashed is False
    verdict = start_run(RunState(clean=True, loaded={"a"}), 1, KEPT)
    assert verdict.crashed is False and verdict.failed == {} and verdict.state.streaks == {}
    assert verdict.state.clean is False and verdict.state.pid == 1  # this run is now "running"


def test_a_stream_being_loaded_is_the_only_one_involved():
    assert involved_in_crash(crashed(loaded={"a", "b"}, loading={"c"})) == {"c": WHILE_LOADING}


def test_streams_that_were_only_running_are_not_involved():
    # their code runs in node processes: an OOM kill or a power cut of the runtime is not theirs
    assert involved_in_crash(crashed(loaded={"a", "b"})) == {}
    assert involved_in_crash(RunState(clean=True, loaded={"a"})) == {}


def test_crashes_no_stream_caused_mark_no_kept_stream_failed():
    marker = None
    for _ in range(3):  # three power cuts in a row, every kept stream running each time
        marker, failed = run_and_crash(marker, loaded=KEPT)
        assert failed == {}
    verdict = start_run(marker, 46, KEPT)
    assert verdict.crashed and verdict.involved == {} and verdict.failed == {} and verdict.state.streaks == {}


def test_two_crashes_in_a_row_mark_the_stream_failed_and_spare_the_others():
    marker, failed = run_and_crash(None, loaded={"b"}, loading={"a"})
    assert failed == {}
    marker, failed = run_and_crash(marker, loading={"a", "b"})  # b involved from the second crash on
    assert failed == {}
    verdict = start_run(marker, 43, KEPT)
    assert set(verdict.failed) == {"a"}
    assert verdict.failed["a"].startswith("it was involved in the runtime's last 2 crashes in a row")
    assert "(the runtime died while it was being loaded, 2 times)" in verdict.failed["a"]
    assert verdict.state.streaks == {"b": [WHILE_LOADING]}  # one crash held against b, none against a now


def test_a_clean_stop_between_crashes_resets_the_count():
    marker, _ = run_and_crash(None, loading={"a"})
    life = Lifecycle(start_run(marker, 43, KEPT).state)
    life.loaded("a")
    life.stopped_cleanly()
    marker, failed = run_and_crash(life.state, loading={"a"})
    assert failed == {}
    assert start_run(marker, 44, KEPT).failed == {}


def test_a_crash_that_does_not_involve_a_stream_ends_its_streak():
    marker, _ = run_and_crash(None, loading={"a", "b"})
    marker, _ = run_and_crash(marker, loaded={"a", "b"}, loading={"c"})  # only c is involved
    verdict = start_run(marker, 44, KEPT)
    assert verdict.failed == {} and verdict.state.streaks == {"c": [WHILE_LOADING]}


def test_a_crash_while_a_stream_only_runs_ends_its_streak():
    marker, _ = run_and_crash(None, loading={"a"})
    marker, _ = run_and_crash(marker, loaded={"a"})
    marker, _ = run_and_crash(marker, loading={"a"})
    verdict = start_run(marker, 44, KEPT)
    assert verdict.failed == {} and verdict.state.streaks == {"a": [WHILE_LOADING]}


def test_streams_without_a_record_are_dropped_and_removed_ones_start_afresh():
    marker, _ = run_and_crash(None, loading={"a", "gone"})
    assert "gone" not in start_run(marker, 43, KEPT).state.streaks
    life = Lifecycle(start_run(marker, 43, KEPT).state)
    life.forget("a")  # `tatolab rm a` or a new `run -d`
    assert life.state.streaks == {}


def test_the_marker_round_trips_and_refuses_what_it_did_not_write():
    state = RunState(clean=False, pid=7, loading={"x"}, loaded={"y"}, streaks={"y": [WHILE_LOADING]})
    assert RunState.from_json(json.loads(json.dumps(state.to_json()))) == state
    for bad in ([], {"pid": 3}, {"clean": "no"}, {"clean": True, "streaks": []}):
        with pytest.raises(ValueError):
            RunState.from_json(bad)


def record(name: str = "cam", project: str = "/p") -> KeptRecord:
    graph = {"stream": name, "nodes": [{"name": "n", "class": "nodes.n:N", "inputs": [], "outputs": [{"port": "out"}]}],
             "links": [],
             "exposures": [{"node": "n", "port": "out", "level": "private"}]}
    return KeptRecord(name=name, project=project, python=f"{project}/.venv/bin/python", graph=graph)


def test_a_record_holds_graph_project_interpreter_exposures_and_stopped(tmp_path: Path):
    store = RecordStore(tmp_path / "streams")
    store.save(record())
    data = json.loads((tmp_path / "streams" / "cam.json").read_text())
    assert data["project"] == "/p" and data["python"] == "/p/.venv/bin/python"
    assert data["exposures"] == [{"node": "n", "port": "out", "level": "private"}]
    assert data["stopped"] is False and data["graph"]["nodes"][0]["class"] == "nodes.n:N"
    again = store.read("cam")
    assert isinstance(again, KeptRecord) and again.graph == record().graph and again.state == "kept"
    again.stopped = True
    store.save(again)
    assert store.read("cam").state == "stopped"
    assert [p.name for p in (tmp_path / "streams").iterdir()] == ["cam.json"]  # no temporary left


def test_a_truncated_record_is_reported_with_its_project_and_never_loaded(tmp_path: Path):
    store = RecordStore(tmp_path / "streams")
    store.save(record("cam", "/home/you/cams"))
    store.save(record("other"))
    path = store.path("cam")
    path.write_bytes(path.read_bytes()[:90])
    damaged = store.read("cam")
    assert isinstance(damaged, DamagedRecord)
    assert damaged.project == "/home/you/cams"
    assert str(path) in damaged.reason and "damaged" in damaged.reason
    path.write_bytes(b"")
    assert "empty" in store.read("cam").reason
    assert {type(r).__name__ for r in store.read_all()} == {"DamagedRecord", "KeptRecord"}


def test_an_atomic_write_cut_short_leaves_the_old_record_whole(tmp_path: Path, monkeypatch):
    store = RecordStore(tmp_path / "streams")
    store.save(record())
    before = store.path("cam").read_bytes()

    def power_cut(*args):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", power_cut)
    with pytest.raises(OSError):
        store.save(record(project="/elsewhere"))
    monkeypatch.undo()
    assert store.path("cam").read_bytes() == before
    assert store.names() == ["cam"]  # the temporary is not taken for a record
    assert [p.name for p in store.remove_leftover_temporaries()] == [f".cam.json.{os.getpid()}.tmp"]
    assert isinstance(store.read("cam"), KeptRecord)


def test_write_atomically_fsyncs_the_file_and_its_folder(tmp_path: Path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_atomically(tmp_path / "x.json", b"{}")
    assert synced[0].endswith(".tmp") and synced[1] == str(tmp_path)


def test_a_name_that_is_not_a_stream_name_never_reaches_outside_the_records(tmp_path):
    from tatolab._runtime.stored.records import RecordStore

    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    store = RecordStore(tmp_path / "streams")
    (tmp_path / "streams").mkdir()
    assert store.read("../victim") is None
    store.remove("../victim")
    assert victim.exists()


def test_hidden_and_dotted_stream_names_are_records_like_any_other(tmp_path: Path):
    store = RecordStore(tmp_path / "streams")
    for name in (".cam", "..-..-x", "-x", "~"):
        store.save(record(name))
    store.path(".cam").with_name(f"..cam.json.{os.getpid()}.tmp").write_text("{")  # a write cut short
    assert store.names() == ["-x", "..-..-x", ".cam", "~"]
    assert all(isinstance(store.read(name), KeptRecord) for name in store.names())
    (tmp_path / "streams" / "Cam.json").write_text("{}")  # made by hand: no stream has that name
    assert store.strays() == [tmp_path / "streams" / "Cam.json"]


def test_a_record_whose_graph_cannot_start_is_damaged_with_the_reason(tmp_path: Path):
    store = RecordStore(tmp_path / "streams")
    whole = record()
    whole.graph["nodes"] = [
        {"name": "src", "class": "nodes.s:S", "inputs": [], "outputs": [{"port": "out"}]},
        {"name": "n", "class": "nodes.n:N", "inputs": [{"port": "in", "delivery_profile": "ordered"}], "outputs": []},
    ]
    whole.graph["links"] = [{"from": {"node": "src", "port": "out"}, "to": {"node": "n", "port": "in"}},
                            {"from": {"address": "other/src/out"}, "to": {"node": "n", "port": "in"}}]
    store.save(whole)
    assert isinstance(store.read("cam"), KeptRecord)
    breakages = {
        "links to missing/in, which is not an input of its nodes": lambda g: g["links"][0]["to"].update(node="missing"),
        "links from src/nope, which is not an output of its nodes": lambda g: g["links"][0]["from"].update(port="nope"),
        "gives node n no list of outputs": lambda g: g["nodes"][1].pop("outputs"),
        "gives node src a class (module:Class) that is a whole number, not text": lambda g: g["nodes"][0].update(
            {"class": 3}),
        "gives node src no class (module:Class)": lambda g: g["nodes"][0].pop("class"),
        "has two nodes named n": lambda g: g["nodes"][0].update(name="n"),
        "gives node src a port named '../../x', which is not a port name": lambda g: g["nodes"][0]["outputs"].append(
            {"port": "../../x"}),
        "has a link (number 3) that is text, not an object": lambda g: g["links"].append("src->n"),
    }
    for reason, breakage in breakages.items():
        data = json.loads(json.dumps(whole.to_json()))
        breakage(data["graph"])
        store.path("cam").write_text(json.dumps(data))
        damaged = store.read("cam")
        assert isinstance(damaged, DamagedRecord), reason
        assert f"its graph {reason}" in damaged.reason and damaged.project == "/p"
