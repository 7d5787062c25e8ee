"""Node health decisions: the watchdog, the memory limit and what a node's state is called.

Plain functions over numbers, so each rule is testable without a process; the supervisor
does the polling and the killing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DEFAULT_WATCHDOG_MS = 10_000  # reactive and continuous nodes; manual ones drive themselves
CRASH_LOOP_AFTER = 3  # this many exits in a row without a stable run: the node is "crashed"
POLL_S = 0.25  # how often the supervisor reads a node's status and memory


FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0


def restart_delay_s(crash_streak: int) -> float:
    """How long to wait before restarting a node that ended ``crash_streak`` times in a row:
    the first time at once (a warm start costs milliseconds), then 0.2 s doubling up to 5 s."""
    if crash_streak <= 1:
        return 0.0
    return min(FIRST_BACKOFF_S * 2.0 ** (crash_streak - 2), MAX_BACKOFF_S)


class NodeState(str, enum.Enum):
    """What a node is doing, as `tatolab graph` and `streams` say it (the value is the word shown)."""

    STARTING = "starting"
    LOADING = "loading"  # running its setup(), which said what it loads (ctx.loading): graph gives what
    RUNNING = "running"
    WAITING = "waiting"  # running, and waiting for what it needs (an input device, a display): graph gives why
    RESTARTING = "restarting"  # its process ended and is being started again
    CRASHED = "crashed"  # it ended CRASH_LOOP_AFTER times in a row; still retried, at the longest backoff
    FAILED = "failed"  # it said it can never run as configured (CannotRun): not restarted until its stream changes
    STOPPED = "stopped"

    def __str__(self) -> str:
        return self.value


class Trouble(enum.Enum):
    HUNG = "hung"
    OVER_MEMORY = "over its memory limit"


@dataclass(frozen=True)
class Verdict:
    """Why a running node must be restarted: the kind of trouble, and the words for it."""

    trouble: Trouble
    reason: str  # starts with the trouble's value: "hung: process() has not returned for ..."


def watchdog_limit_ms(execution: str, declared: float | None) -> float | None:
    """The watchdog a node runs under: what it declared, else the default; None for no watchdog."""
    if declared is not None:
        return declared or None  # 0 turns it off
    if execution in ("manual", "thread"):
        return None  # the runtime never calls process() (its own threads, or run()), so there is nothing to time
    return DEFAULT_WATCHDOG_MS


def memory_limit_bytes(declared_mb: float | None) -> int | None:
    return int(declared_mb * 1024 * 1024) if declared_mb else None


def busy_ms(busy_since_ns: int, now_ns: int) -> float | None:
    """How long the running ``process()`` call has taken so far; None when the node is idle."""
    if not busy_since_ns or now_ns < busy_since_ns:
        return None
    return (now_ns - busy_since_ns) / 1e6


def hung(busy_since_ns: int, now_ns: int, limit_ms: float | None) -> Verdict | None:
    """The node is hung, or None while it is within its watchdog."""
    if limit_ms is None:
        return None
    busy = busy_ms(busy_since_ns, now_ns)
    if busy is None or busy <= limit_ms:
        return None
    return Verdict(Trouble.HUNG, (
        f"hung: process() has not returned for {busy / 1000:.1f} s, longer than its watchdog "
        f"of {limit_ms / 1000:g} s (raise it with @node(watchdog_ms=...) if such calls are expected)"
    ))


def over_memory(rss_bytes: int | None, limit_bytes: int | None) -> Verdict | None:
    """The node is over its memory limit, or None."""
    if limit_bytes is None or rss_bytes is None or rss_bytes <= limit_bytes:
        return None
    return Verdict(Trouble.OVER_MEMORY, (
        f"over its memory limit: it uses {rss_bytes / 2**20:.0f} MB, more than "
        f"memory_limit_mb={limit_bytes / 2**20:g}"
    ))


def state_after_exit(crash_streak: int) -> NodeState:
    """The state of a node whose process ended and will be started again.

    ``restarting`` while it is coming back; ``crashed`` once it has ended ``CRASH_LOOP_AFTER``
    times in a row without a stable run (it is still retried, at the longest backoff).
    """
    return NodeState.CRASHED if crash_streak >= CRASH_LOOP_AFTER else NodeState.RESTARTING


def shown_state(state: NodeState, waiting: object, loading: object = None, set_up: bool = True) -> NodeState:
    """The state `graph` shows: a running node whose ``setup()`` has not returned and said what it
    loads (ctx.loading) is ``loading``; one that reports ``waiting`` (ctx.report(waiting=why),
    as the built-ins do while no device or display is there) is ``waiting``."""
    if state is NodeState.RUNNING and not set_up and isinstance(loading, str) and loading:
        return NodeState.LOADING
    return NodeState.WAITING if state is NodeState.RUNNING and isinstance(waiting, str) and waiting else state


def is_trouble(node: dict) -> bool:
    """Whether ``tatolab streams`` should mention this node (from its ``graph`` entry)."""
    return (node.get("state") in (NodeState.RESTARTING, NodeState.CRASHED, NodeState.FAILED)
            or bool(node.get("restarts"))
            or bool(node.get("hung")))
