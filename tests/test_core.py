"""The stream lifecycle's core (tatolab/_runtime/core) as command sequences with a fake clock: no
runtime, no process, no file. Each test drives ``Streams`` the way runtime.py does and reads the
effects it returns; the end-to-end tests in test_kept.py, test_run.py and test_dev.py check that
the driver carries them out."""

from __future__ import annotations

import itertools

import pytest

from tatolab._control.errors import Reason
from tatolab._runtime.core.effects import (Forget, LoadFailed, MarkFailed, Refuse, RefuseDamaged, Reply, Say,
                                           SetStopped, Snapshot, StartNodes, Superseded, Unknown, Unload,
                                           WriteMarker, WriteRecord)
from tatolab._runtime.core.streams import (ATTACHED, KEEP, RECORD, REMOVED, REPLACED, REPLACED_BY_KEEP, STOPPED,
                                           Held, Load, Ref, Streams, Version)
from tatolab._runtime.rules.cameras import CameraUse, Missing
from tatolab._runtime.rules.crashes import RunState, start_run
from tatolab._runtime.rules.reload import Imported, Saved

_ids = itertools.count(1)


class Clock:
    """A fake monotonic clock: it moves only when a test says so."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000

    def tick(self, ms: int = 1) -> int:
        self.now_ns += ms * 1_000_000
        return self.now_ns


def version(name: str = "cam", project: str = "/p", mode: str = "attached", nodes: int = 2,
            cameras: tuple[CameraUse, ...] = ()) -> Version:
    return Version(next(_ids), name, project, mode, nodes, cameras)


def start(core: Streams, clock: Clock, load: Load) -> list:
    """One whole start as the driver does it: check, go, started; every effect in order."""
    effects = core.check(load)
    if any(isinstance(e, (Refuse, Superseded, LoadFailed)) for e in effects):
        return effects
    effects += core.go(load.version.id, clock.tick())
    return effects + core.started(load.version.id, clock.tick(), at_runtime_start=load.devices_may_come)


def kinds(effects: list) -> list[str]:
    return [type(e).__name__ for e in effects]


def marker(effects: list) -> RunState:
    """The last marker the effects write, as the next runtime reads it."""
    return RunState.from_json([e for e in effects if isinstance(e, WriteMarker)][-1].state)


@pytest.fixture
def core() -> Streams:
    streams = Streams()
    streams.began(start_run(None, 4242, set()).state)
    return streams


def test_run_starts_an_attached_stream_and_says_nothing_to_the_marker(core):
    clock = Clock()
    new = version()
    effects = start(core, clock, Load(new))
    assert kinds(effects) == ["StartNodes"]
    assert core.running["cam"] is new and new.phase == "running" and new.since_ns == clock.now_ns


def test_a_start_is_starting_until_its_nodes_started(core):
    clock = Clock()
    new = version()
    assert core.check(Load(new)) == []
    assert core.go(new.id, clock.tick(5)) == [StartNodes(new.id)]
    assert (new.phase, new.since_ns) == ("starting", clock.now_ns)
    core.started(new.id, clock.tick(7))
    assert (new.phase, new.since_ns) == ("running", clock.now_ns)


def test_run_d_records_the_stream_and_the_marker_says_loading_then_loaded(core):
    clock = Clock()
    new = version(mode="kept")
    checked = core.check(Load(new, KEEP, reason=REPLACED_BY_KEEP))
    assert checked == [Snapshot(new.id)]  # the copy of sources first: it may still refuse
    went = core.go(new.id, clock.tick())
    assert kinds(went) == ["WriteMarker", "WriteRecord", "StartNodes"]
    assert went[1] == WriteRecord(new.id) and marker(went).loading == {"cam"}
    assert marker(core.started(new.id, clock.tick())).loaded == {"cam"}


def test_run_d_again_from_its_project_replaces_the_running_kept_stream_first(core):
    clock = Clock()
    old = version(mode="kept")
    start(core, clock, Load(old, KEEP))
    new = version(mode="kept")
    effects = start(core, clock, Load(new, KEEP, record=Held("/p", "kept"), reason=REPLACED_BY_KEEP))
    assert kinds(effects) == ["Snapshot", "Unload", "WriteMarker", "WriteRecord", "StartNodes", "WriteMarker"]
    assert effects[1] == Unload(old.id, REPLACED_BY_KEEP)  # the old version stops before the new one is recorded
    assert core.running["cam"] is new


def test_run_d_from_another_project_is_refused_and_the_kept_stream_runs_on(core):
    clock = Clock()
    old = version(mode="kept")
    start(core, clock, Load(old, KEEP))
    effects = core.check(Load(version(project="/q", mode="kept"), KEEP, record=Held("/p", "kept")))
    assert kinds(effects) == ["Refuse"] and effects[0].error.code == "name_kept"
    assert "kept from /p" in effects[0].error.message
    assert core.running["cam"] is old and core.pending == {}


def test_a_name_an_attached_stream_holds_is_refused_for_run_and_run_d(core):
    clock = Clock()
    old = version()
    start(core, clock, Load(old))
    for how in (ATTACHED, KEEP):
        effects = core.check(Load(version(mode="kept" if how == KEEP else "attached"), how))
        assert kinds(effects) == ["Refuse"] and effects[0].error.code == "name_loaded"
    assert core.running["cam"] is old


def test_a_stopped_kept_stream_holds_its_name(core):
    effects = core.check(Load(version(project="/q"), record=Held("/p", "stopped")))
    assert effects[0].error.code == "name_kept" and "(stopped)" in effects[0].error.message


def test_a_dev_reload_replaces_the_attached_version_and_the_old_stops_first(core):
    clock = Clock()
    old = version()
    start(core, clock, Load(old))
    new = version()
    effects = start(core, clock, Load(new, replacing=Ref("cam", old.id), reason=REPLACED))
    assert effects == [Unload(old.id, REPLACED), StartNodes(new.id)]


def test_a_version_stopped_before_its_replacement_checks_is_stopped_meanwhile(core):
    clock = Clock()
    old = version()
    start(core, clock, Load(old))
    core.stop("cam", None)
    effects = core.check(Load(version(), replacing=Ref("cam", old.id)))
    assert kinds(effects) == ["Refuse"]
    error = effects[0].error
    assert error.code == "stopped_meanwhile" and error.message == "cam was stopped meanwhile (stopped by a stop request)"


def test_a_stop_between_a_check_and_its_go_ends_the_start(core):
    clock = Clock()
    old = version()
    start(core, clock, Load(old))
    new = version()
    assert core.check(Load(new, replacing=Ref("cam", old.id))) == []
    core.stop("cam", None)  # (the driver's load lock keeps this from happening; the core refuses it still)
    effects = core.go(new.id, clock.tick())
    assert kinds(effects) == ["Refuse"] and effects[0].error.code == "stopped_meanwhile"
    assert "cam" not in core.running and core.pending == {}


def test_a_kept_start_stopped_while_it_was_checked_is_superseded(core):
    clock = Clock()
    assert kinds(core.loading("cam")) == ["WriteMarker"]
    # `tatolab stop` landed while its classes were being checked: the record now says stopped
    stopped = core.check(Load(version(mode="kept"), RECORD, record=Held("/p", "stopped"), kept_project="/p"))
    assert stopped == [Superseded(None)]
    replaced = core.check(Load(version(mode="kept"), RECORD, record=Held("/q", "kept"), kept_project="/p"))
    assert replaced == [Superseded(None)]
    running = version(mode="kept")
    start(core, clock, Load(running, KEEP))
    again = core.check(Load(version(mode="kept"), RECORD, record=Held("/p", "kept"), kept_project="/p"))
    assert again == [Superseded(running.id)]


def test_stop_of_a_kept_stream_records_it_stopped_before_it_unloads(core):
    clock = Clock()
    kept = version(mode="kept")
    start(core, clock, Load(kept, KEEP))
    effects = core.stop("cam", Held("/p", "kept"))
    assert kinds(effects) == ["SetStopped", "Unload", "WriteMarker", "Reply"]
    assert effects[0] == SetStopped("cam", True) and effects[1] == Unload(kept.id, STOPPED)
    assert marker(effects).loaded == set() and effects[-1] == Reply({"name": "cam", "state": "stopped", "kept": True})
    # stopped, it is still known: a second stop records it stopped again and unloads nothing
    assert kinds(core.stop("cam", Held("/p", "stopped"))) == ["SetStopped", "Reply"]


def test_stop_of_an_attached_stream_and_of_names_nobody_holds(core):
    clock = Clock()
    attached = version()
    start(core, clock, Load(attached))
    assert core.stop("cam", None) == [Unload(attached.id, STOPPED),
                                      Reply({"name": "cam", "state": "stopped", "kept": False})]
    assert core.stop("cam", None) == [Unknown("cam")]
    assert core.stop("bad", Held(None, "failed", damaged=True)) == [RefuseDamaged("bad", "stopped")]


def test_rm_stops_it_then_forgets_the_record_and_its_crashes(core):
    clock = Clock()
    kept = version(mode="kept")
    start(core, clock, Load(kept, KEEP))
    effects = core.remove("cam", Held("/p", "kept"))
    assert kinds(effects) == ["SetStopped", "Unload", "Forget", "WriteMarker", "Reply"]
    assert effects[1] == Unload(kept.id, REMOVED) and effects[2] == Forget("cam")
    assert effects[-1] == Reply({"name": "cam", "forgotten": True, "project": "/p"})
    attached = version(name="live", project="/a")
    start(core, clock, Load(attached))
    assert core.remove("live", None) == [Unload(attached.id, REMOVED),
                                         Reply({"name": "live", "forgotten": False, "project": "/a"})]
    assert core.remove("live", None) == [Unknown("live")]
    assert kinds(core.remove("bad", Held(None, "failed", damaged=True))) == ["Forget", "WriteMarker", "Reply"]


def test_a_terminal_that_hangs_up_unloads_only_its_own_version(core):
    clock = Clock()
    old = version()
    start(core, clock, Load(old))
    new = version()
    start(core, clock, Load(new, replacing=Ref("cam", old.id)))
    assert core.detach(Ref("cam", old.id), Reason("its terminal closed")) == []  # replaced already
    assert core.detach(Ref("cam", new.id), Reason("its terminal closed")) == [Unload(new.id, Reason("its terminal closed"))]


def test_kept_streams_load_at_the_runtime_start_and_say_so(core):
    clock = Clock()
    records = {"a": Held("/p", "kept"), "b": Held("/p", "stopped"), "c": Held("/p", "failed"),
               "d": Held(None, "failed", damaged=True), "e": Held("/q", "kept")}
    assert core.at_start(records) == ["a", "e"]
    for name in core.at_start(records):
        assert marker(core.loading(name)).loading == {name}
        new = version(name=name, project=records[name].project or "", mode="kept")
        effects = start(core, clock, Load(new, RECORD, record=records[name], kept_project=records[name].project,
                                          devices_may_come=True))
        assert kinds(effects) == ["StartNodes", "WriteMarker", "Say"]
        assert effects[-1].text == f"kept stream {name} loaded from its record (2 nodes, project {new.project})"
        assert core.loading_done(name) == []  # loaded: nothing left to say
    assert set(core.running) == {"a", "e"}


def test_a_kept_stream_that_cannot_load_is_marked_failed_while_the_others_start(core):
    clock = Clock()
    gone = Reason("its project folder /gone is gone")
    core.loading("broken")
    effects = start(core, clock, Load(version(name="broken", project="/gone", mode="kept"), RECORD,
                                      record=Held("/gone", "kept"), kept_project="/gone", problem=gone))
    assert effects == [MarkFailed("broken", gone), LoadFailed("broken", gone)]
    assert marker(core.loading_done("broken")).loading == set()
    core.loading("fine")
    fine = version(name="fine", mode="kept")
    assert kinds(start(core, clock, Load(fine, RECORD, record=Held("/p", "kept"), kept_project="/p"))) == [
        "StartNodes", "WriteMarker"]
    assert set(core.running) == {"fine"}


def test_a_start_whose_rings_cannot_be_made_is_marked_failed_if_kept(core):
    clock = Clock()
    why = Reason("stream cam could not start: shared memory is full")
    kept = version(mode="kept")
    core.check(Load(kept, KEEP))
    core.go(kept.id, clock.tick())
    effects = core.start_failed(kept.id, why)
    assert kinds(effects) == ["WriteMarker", "MarkFailed"] and marker(effects).loading == set()
    assert "cam" not in core.running
    attached = version()
    core.check(Load(attached))
    core.go(attached.id, clock.tick())
    assert core.start_failed(attached.id, why) == [] and "cam" not in core.running
    recorded = version(mode="kept")
    core.check(Load(recorded, RECORD, record=Held("/p", "kept"), kept_project="/p"))
    core.go(recorded.id, clock.tick())
    assert core.start_failed(recorded.id, why) == [MarkFailed("cam", why), LoadFailed("cam", why)]


def test_a_record_that_cannot_be_written_starts_nothing_and_the_marker_forgets_it(core):
    clock = Clock()
    kept = version(mode="kept")
    core.check(Load(kept, KEEP))
    core.go(kept.id, clock.tick())
    assert marker(core.record_unwritten(kept.id)).loading == set()
    assert "cam" not in core.running


def _die(effects: list) -> RunState:
    """The runtime is killed: the marker stays as last written."""
    return marker(effects)


def test_two_crashes_in_a_row_while_loading_mark_the_stream_failed(core):
    written = core.loading("crashy")  # the runtime dies while loading it
    verdict = start_run(_die(written), 4243, {"crashy", "calm"})
    assert verdict.crashed and verdict.involved == {"crashy": "while it was being loaded"} and verdict.failed == {}
    second = Streams()
    second.began(verdict.state)
    written = second.loading("crashy")  # and again
    verdict = start_run(_die(written), 4244, {"crashy", "calm"})
    assert set(verdict.failed) == {"crashy"}
    assert "last 2 crashes in a row" in verdict.failed["crashy"]


def test_a_clean_stop_between_crashes_and_a_running_stream_spare_it(core):
    clock = Clock()
    core.loading("crashy")
    verdict = start_run(marker(core.loading("crashy")), 4243, {"crashy"})
    second = Streams()
    second.began(verdict.state)
    second.loading("crashy")
    new = version(name="crashy", mode="kept")
    effects = start(second, clock, Load(new, RECORD, record=Held("/p", "kept"), kept_project="/p"))
    # it loaded, then only ran: a crash now is not its
    assert start_run(marker(effects), 4244, {"crashy"}).failed == {}
    third = Streams()
    third.began(start_run(marker(core.loading("crashy")), 4245, {"crashy"}).state)
    clean = third.stopped_cleanly()
    assert clean[0].clean and start_run(marker(clean), 4246, {"crashy"}).crashed is False


def test_run_d_again_forgets_the_crashes_of_the_record_it_replaces(core):
    clock = Clock()
    state = RunState(clean=False, pid=1, streaks={"cam": ["while it was being loaded"]})
    core.began(state)
    new = version(mode="kept")
    core.check(Load(new, KEEP))
    assert marker(core.go(new.id, clock.tick())).streaks == {}


def _graph(config: int, second: str = "nodes:B") -> dict:
    return {"stream": "cam", "nodes": [{"name": "a", "class": "nodes:A", "config": {"x": config}},
                                       {"name": "b", "class": second}], "links": [], "exposures": []}


IMPORTS = {"a": Imported(frozenset({"nodes.a"}), frozenset({"/p/nodes/a.py"})),
           "b": Imported(frozenset({"nodes.b"}), frozenset({"/p/nodes/b.py"}))}


def test_a_dev_reload_in_place_restarts_what_changed_and_refuses_an_ended_stream(core):
    clock = Clock()
    running = version(nodes=2)
    running.graph = _graph(1)
    start(core, clock, Load(running))
    ref = Ref("cam", running.id)
    assert core.in_place(ref, _graph(2))
    assert not core.in_place(ref, _graph(1, second="nodes:C"))  # a new shape: replaced whole
    assert not core.in_place(None, _graph(2))
    [restart] = core.reload(ref, _graph(2), [Saved("nodes/c.py", "/p/nodes/c.py")], IMPORTS, (), ())
    assert (restart.why, restart.kept) == ({"a": "its config changed"}, ["b"])  # b imports nothing saved: kept
    [again] = core.reload(ref, _graph(2), [Saved("nodes/b.py", "/p/nodes/b.py")], IMPORTS, (), ())
    assert (again.why, again.kept) == ({"b": "it imports nodes/b.py"}, ["a"])  # compared with the version now running
    core.stop("cam", None)
    assert not core.in_place(ref, _graph(2))
    refused = core.reload(ref, _graph(2), [], IMPORTS, (), ())
    assert refused[0].error.code == "stopped_meanwhile"


def test_cameras_a_running_stream_holds_are_refused_unless_it_is_replaced(core):
    clock = Clock()
    use = CameraUse("cam", "source", "/dev/video0")
    holder = version(cameras=(use,))
    start(core, clock, Load(holder))
    other = version(name="other", project="/q", cameras=(CameraUse("other", "in", "/dev/video0"),))
    refused = core.check(Load(other))
    assert refused[0].error.code == "camera_held"
    again = version(cameras=(CameraUse("cam", "source", "/dev/video0"),))
    assert core.check(Load(again, replacing=Ref("cam", holder.id))) == []  # the version it replaces lets go
    missing = core.check(Load(version(name="third"), missing=(Missing("source", None),)))
    assert missing[0].error.code == "camera_missing"
    assert core.check(Load(version(name="boot", mode="kept"), RECORD, record=Held("/p", "kept"), kept_project="/p",
                           missing=(Missing("source", None),), devices_may_come=True)) == []


def test_the_node_caps_count_every_running_stream_but_the_one_replaced(core, monkeypatch):
    monkeypatch.setenv("TATOLAB_MAX_NODES", "5")
    clock = Clock()
    big = version(nodes=3)
    start(core, clock, Load(big))
    assert core.check(Load(version(name="more", nodes=3)))[0].error.code == "too_many_nodes"
    assert core.check(Load(version(nodes=4), replacing=Ref("cam", big.id))) == []
    core.reshaped("cam", {"nodes": [{"name": "a"}]}, ())  # a node removed live
    assert core.check(Load(version(name="more", nodes=3))) == []
    assert core.caps_refusal("cam", 5, adding="extra") is None
    assert core.caps_refusal("cam", 6, adding="extra").code == "too_many_nodes"


def test_tatolab_start_of_a_name_decides_before_anything_loads(core):
    clock = Clock()
    attached = version(name="live")
    start(core, clock, Load(attached))
    refused = core.start("live", None)
    assert refused[0].error.message == "live is attached and already running; only kept streams are started"
    assert core.start("nobody", None) == [Unknown("nobody")]
    assert core.start("bad", Held(None, "failed", damaged=True)) == [RefuseDamaged("bad", "started")]
    assert core.start("cam", Held("/p", "failed")) == [SetStopped("cam", False)]  # a failed one is retried
    kept = version(mode="kept")
    start(core, clock, Load(kept, KEEP))
    assert core.start("cam", Held("/p", "kept")) == [Reply(kept.id)]


def test_a_live_change_finds_the_running_stream_or_says_why_not(core):
    clock = Clock()
    running = version()
    start(core, clock, Load(running))
    assert core.live("cam", None) == [Reply(running.id)]
    stopped = core.live("kept", Held("/p", "stopped"))
    assert stopped[0].error.code == "not_running"
    assert core.live("nobody", None) == [Unknown("nobody")]


def test_shutdown_unloads_every_stream_and_no_start_follows(core):
    clock = Clock()
    a, b = version(name="a"), version(name="b", mode="kept")
    start(core, clock, Load(a))
    start(core, clock, Load(b, KEEP))
    stopping = core.shutdown()
    assert {e.version for e in stopping if isinstance(e, Unload)} == {a.id, b.id}
    assert all(e.by_runtime and e.reason.text == "the runtime stopped" for e in stopping)
    assert core.check(Load(version()))[0].error.message == "the runtime is stopping"
    assert kinds(core.reload(Ref("a", a.id), _graph(1), [], {}, (), ())) == ["Refuse"]


def test_the_kept_say_line_and_marker_effects_are_plain_values():
    said = Say("info", "x", {"stream": "cam"})
    assert said == Say("info", "x", {"stream": "cam"})


def test_a_start_cut_short_leaves_nothing_of_it_and_the_old_version_as_it_was(core):
    clock = Clock()
    old = version(mode="kept")
    start(core, clock, Load(old, KEEP))
    new = version(mode="kept")
    assert core.check(Load(new, KEEP, record=Held("/p", "kept"))) == [Snapshot(new.id)]
    core.abandon(new.id)  # its copy of sources could not be made: the old version runs on
    assert core.running["cam"] is old and core.pending == {}
    other = version(name="other")
    core.check(Load(other))
    core.go(other.id, clock.tick())
    core.abandon(other.id)  # an error while it started
    assert "other" not in core.running and core.pending == {}
    core.abandon(other.id)  # twice is nothing
