"""What the relay changes when the set of exposed outputs changes: the listeners to open and
close, the broadcasts to make and end, the feeders to restart and the network readers to cut.

Plain values in, plain values out: no network, no thread, no moq (tests/test_relay_plan.py).
It owns nothing: the relay's thread (``serve.py``) holds the state a plan is made from and
applies it, in this order: listeners, then drops (cutting their readers), then additions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

KINDS = ("loopback", "public")  # the two origins: every exposed output / the public ones


@dataclass(frozen=True)
class Target:
    """One output the relay should serve from now on."""

    level: str  # private | public
    ring: object  # its ring: another one means its stream was loaded again

    @property
    def kinds(self) -> tuple[str, ...]:
        """The origins it is served from: loopback always, the public one too when public."""
        return KINDS if self.level == "public" else ("loopback",)


@dataclass(frozen=True)
class Served:
    """One output the relay serves now: its ring and the origins it has a broadcast in."""

    ring: object
    kinds: frozenset[str]


@dataclass
class Plan:
    open: list[str] = field(default_factory=list)  # listener kinds to start
    close: list[str] = field(default_factory=list)  # listener kinds to stop: every reader there is cut
    drop: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> kinds whose broadcast ends
    why: dict[str, str] = field(default_factory=dict)  # path -> why it was dropped (for the log)
    add: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> kinds to make a broadcast in
    refeed: set[str] = field(default_factory=set)  # paths whose feeder restarts (new ring, or a new kind)

    def cuts(self, kind: str, path: str) -> bool:
        """Whether a network reader of ``path`` that came in on the ``kind`` listener is cut."""
        return kind in self.close or kind in self.drop.get(path, ())

    def gone(self, path: str, served: Mapping[str, Served]) -> bool:
        """Whether ``path`` is served nowhere once this plan is applied."""
        return path in self.drop and set(self.drop[path]) >= served[path].kinds


def plan(listening: frozenset[str] | set[str], served: Mapping[str, Served], wanted: Mapping[str, Target],
         public_hosts: bool) -> Plan:
    """How to go from serving ``served`` with ``listening`` open to serving ``wanted``.

    Loopback listens while anything is exposed; the public listener while a public output is and
    the machine has a public address (``public_hosts``). Public broadcasts are made even without
    one: a joined relay on the internet reads them."""
    result = Plan()
    want_listening = {"loopback"} if wanted else set()
    if public_hosts and any(t.level == "public" for t in wanted.values()):
        want_listening.add("public")
    result.open = [k for k in KINDS if k in want_listening and k not in listening]
    result.close = [k for k in KINDS if k in listening and k not in want_listening]
    for path, now in served.items():
        target = wanted.get(path)
        if target is None:
            result.drop[path], result.why[path] = tuple(k for k in KINDS if k in now.kinds), "no longer exposed"
        elif "public" in now.kinds and "public" not in target.kinds:
            result.drop[path], result.why[path] = ("public",), "now private"
    for path, target in wanted.items():
        now = served.get(path)
        kept = now.kinds - set(result.drop.get(path, ())) if now is not None else frozenset()
        new = tuple(k for k in target.kinds if k not in kept)
        if new:
            result.add[path] = new
        if now is None or now.ring is not target.ring or (new and kept):
            result.refeed.add(path)
    return result
