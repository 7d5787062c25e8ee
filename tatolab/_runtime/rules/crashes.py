"""The two-crash rule, as plain state: no files, no processes.

While it runs, the runtime keeps a marker in its state folder (see ``kept.py``) saying that
it is running, which kept streams it is loading (or changing) and which it has loaded. A
clean stop rewrites the marker as clean. At the next start a marker still saying "running"
means the previous runtime died (SIGKILL, a fatal error, a segfault, but also an OOM kill or a
power cut that no stream caused).

A crash is attributed only to what ran inside the runtime's own process when it died: the
kept streams it was loading or changing at that moment (building their rings and node specs,
wiring them). A running stream's code runs in its node processes, never in the runtime's, so
a stream that was merely running is not involved: two power cuts in a row mark nothing failed.

A kept stream involved in the last two crashes in a row is marked failed. A crash that does
not involve a stream ends its streak, and a clean stop ends every streak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CRASHES_TO_FAIL = 2
WHILE_LOADING = "while it was being loaded"


@dataclass
class RunState:
    """What the marker says about one run of the runtime."""

    clean: bool = True
    pid: int | None = None
    loading: set[str] = field(default_factory=set)
    loaded: set[str] = field(default_factory=set)
    # stream name -> how it was involved in each crash of its current streak, oldest first
    streaks: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "clean": self.clean,
            "pid": self.pid,
            "loading": sorted(self.loading),
            "loaded": sorted(self.loaded),
            "streaks": {name: list(hows) for name, hows in sorted(self.streaks.items())},
        }

    @classmethod
    def from_json(cls, data: Any) -> "RunState":
        """Raises ValueError when ``data`` is not a marker this code wrote."""
        if not isinstance(data, dict) or not isinstance(data.get("clean"), bool):
            raise ValueError("not a runtime marker: no 'clean' flag")
        def names(key: str) -> set[str]:
            return {str(n) for n in data.get(key) or []}

        streaks = data.get("streaks", {})
        if not isinstance(streaks, dict):
            raise ValueError("'streaks' is not an object")
        pid = data.get("pid")
        return cls(
            clean=data["clean"],
            pid=pid if isinstance(pid, int) else None,
            loading=names("loading"),
            loaded=names("loaded"),
            streaks={str(k): [str(h) for h in v] for k, v in streaks.items() if isinstance(v, list)},
        )


def involved_in_crash(previous: RunState) -> dict[str, str]:
    """The streams the previous run's crash is attributed to, each with how; empty after a clean
    stop, and empty when the runtime was only running streams (their code runs in other processes)."""
    if previous.clean:
        return {}
    return {name: WHILE_LOADING for name in previous.loading}


@dataclass
class StartVerdict:
    """What a runtime start decides from the previous run's marker."""

    crashed: bool
    involved: dict[str, str]
    failed: dict[str, str]  # stream name -> the reason it is marked failed
    state: RunState  # the new run's state, to write as the marker before loading anything


def failed_reason(hows: list[str]) -> str:
    if len(set(hows)) == 1:
        detail = f"the runtime died {hows[0]}, {len(hows)} times"
    else:
        detail = "the runtime died " + ", then ".join(hows)
    return f"it was involved in the runtime's last {len(hows)} crashes in a row ({detail})"


def start_run(previous: RunState | None, pid: int, kept: set[str]) -> StartVerdict:
    """Decide, at a runtime start, which kept streams the two-crash rule marks failed.

    ``previous`` is the last run's marker (None if there was none), ``kept`` the names of
    the kept streams that have a record (others' streaks are dropped).
    """
    previous = previous or RunState()
    involved = {name: how for name, how in involved_in_crash(previous).items() if name in kept}
    streaks: dict[str, list[str]] = {}
    if not previous.clean:
        # A crash extends the streaks of the streams it involves and ends everyone else's.
        for name, how in involved.items():
            streaks[name] = [*previous.streaks.get(name, []), how][-CRASHES_TO_FAIL:]
    failed = {name: failed_reason(hows) for name, hows in streaks.items() if len(hows) >= CRASHES_TO_FAIL}
    for name in failed:
        del streaks[name]  # `tatolab start` retries it with a fresh count
    state = RunState(clean=False, pid=pid, streaks=streaks)
    return StartVerdict(crashed=not previous.clean, involved=involved, failed=failed, state=state)


class Lifecycle:
    """The running runtime's side: what the marker must say at each moment."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def loading(self, name: str) -> None:
        self.state.loading.add(name)

    def loaded(self, name: str) -> None:
        self.state.loading.discard(name)
        self.state.loaded.add(name)

    def not_loading(self, name: str) -> None:
        self.state.loading.discard(name)

    def unloaded(self, name: str) -> None:
        self.state.loading.discard(name)
        self.state.loaded.discard(name)

    def forget(self, name: str) -> None:
        """A removed or replaced stream starts with no crashes held against it."""
        self.unloaded(name)
        self.state.streaks.pop(name, None)

    def stopped_cleanly(self) -> None:
        self.state = RunState(clean=True, pid=self.state.pid)
