"""The warm interpreters' bookkeeping (tatolab/_runtime/core/warm.py) as command sequences with a fake
clock: when a .venv starts cold, which interpreter serves, which are retired or closed."""

from __future__ import annotations

from dataclasses import dataclass, field

from tatolab._runtime.core.warm import IDLE_AFTER_S, RETRY_AFTER_S, WarmBook, key_of

VENV = "/home/me/project/.venv"
KEY = key_of(VENV, {"LANG": "C.UTF-8"})


@dataclass(eq=False)
class FakeInterpreter:
    name: str
    last_used: float = 0.0
    children: dict[int, object] = field(default_factory=dict)


def test_a_venv_whose_interpreter_failed_starts_cold_for_a_while_then_tries_warm_again():
    book: WarmBook[FakeInterpreter] = WarmBook()
    assert book.warm_allowed(VENV, now=100.0)
    book.failed_at(VENV, now=100.0)
    assert not book.warm_allowed(VENV, now=100.0 + RETRY_AFTER_S)
    assert book.warm_allowed("/home/me/other/.venv", now=101.0)  # another .venv is not held to it
    assert book.warm_allowed(VENV, now=100.0 + RETRY_AFTER_S + 0.1)


def test_an_interpreter_serves_its_key_and_a_failure_of_an_older_one_forgets_no_newer_one():
    book: WarmBook[FakeInterpreter] = WarmBook()
    old, new = FakeInterpreter("old"), FakeInterpreter("new")
    assert book.opened(KEY, old, now=0.0) == []
    assert book.serving[KEY] is old
    book.forget(KEY, old)  # its spawn failed
    assert KEY not in book.serving
    book.opened(KEY, new, now=1.0)  # another start made a newer one meanwhile
    book.forget(KEY, old)  # the older one's failure, told late
    assert book.serving[KEY] is new


def test_a_stale_interpreter_is_retired_once_and_goes_with_its_last_node():
    book: WarmBook[FakeInterpreter] = WarmBook()
    stale = FakeInterpreter("stale", children={41: object(), 42: object()})
    book.opened(KEY, stale, now=0.0)
    book.forget(KEY, stale)
    assert book.retire(stale) is True
    assert book.retire(stale) is False  # a second start that found it stale says nothing again
    fresh = FakeInterpreter("fresh")
    book.opened(KEY, fresh, now=1.0)
    assert book.serving == {KEY: fresh} and book.retired == {stale}
    book.ended(stale)  # its last node ended, and so did it
    assert book.retired == set()


def test_interpreters_idle_past_their_time_go_when_another_opens_and_busy_ones_stay():
    book: WarmBook[FakeInterpreter] = WarmBook()
    other_vars = key_of(VENV, {"LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    third_vars = key_of(VENV, {"LANG": "de_DE.UTF-8"})
    idle = FakeInterpreter("idle", last_used=0.0)
    busy = FakeInterpreter("busy", last_used=0.0, children={7: object()})
    book.opened(other_vars, idle, now=0.0)
    book.opened(third_vars, busy, now=0.0)
    recent = FakeInterpreter("recent", last_used=IDLE_AFTER_S)
    assert book.opened(KEY, recent, now=IDLE_AFTER_S) == []  # none idle long enough yet
    closing = book.opened(key_of("/other/.venv", {}), FakeInterpreter("fourth"), now=IDLE_AFTER_S + 1)
    assert closing == [idle]  # no child, unused past its time; the busy one and the recent one stay
    assert set(book.serving) == {third_vars, KEY, key_of("/other/.venv", {})}


def test_the_runtime_stopping_closes_every_interpreter_serving_or_retired():
    book: WarmBook[FakeInterpreter] = WarmBook()
    serving, retired = FakeInterpreter("serving"), FakeInterpreter("retired", children={1: object()})
    book.opened(KEY, retired, now=0.0)
    book.forget(KEY, retired)
    book.retire(retired)
    book.opened(KEY, serving, now=1.0)
    assert set(map(id, book.close_all())) == {id(serving), id(retired)}
    assert book.serving == {} and book.retired == set()
