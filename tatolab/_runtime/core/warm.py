"""The warm interpreters' bookkeeping as plain state: which one serves each ``.venv`` and set of
start-time variables, which are retired, and when a ``.venv`` starts its nodes cold.

The driver (processes/starter.py) opens and closes the interpreters and passes the time in; what
it decides with them is here, so every rule is a test of a few lines with a fake clock:

- a ``.venv`` whose warm interpreter failed (it could not start, or speaks another tatolab's
  messages) starts cold for ``RETRY_AFTER_S``, then tries warm again;
- a stale interpreter (tatolab reinstalled) is retired once: it stays the parent of the nodes it
  started and ends with the last of them, while the next start gets a fresh one;
- an interpreter with no child left, unused for ``IDLE_AFTER_S``, goes when another one opens (a
  user may try many ``PYTHON*`` settings);
- a failure of one interpreter never forgets a newer one another start made meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, Sized, TypeVar

RETRY_AFTER_S = 30.0  # a .venv whose warm interpreter failed starts cold this long
IDLE_AFTER_S = 300.0  # an interpreter with no child, unused this long, goes when another opens

Key = tuple[str, tuple[tuple[str, str], ...]]  # (the .venv's real path, its start-time variables)


class Interpreter(Protocol):
    """What the bookkeeping reads of a warm interpreter."""

    @property
    def children(self) -> Sized: ...  # the nodes it started that still run

    @property
    def last_used(self) -> float: ...  # when it last started one (the driver's clock)


S = TypeVar("S", bound=Interpreter)


def key_of(venv: str, start_vars: dict[str, str]) -> Key:
    return (venv, tuple(sorted(start_vars.items())))


@dataclass
class WarmBook(Generic[S]):
    """The warm interpreters a runtime holds, by key, and the ``.venv`` that start cold for now."""

    serving: dict[Key, S] = field(default_factory=dict)
    retired: set[S] = field(default_factory=set)  # replaced, still the parent of running nodes
    failed: dict[str, float] = field(default_factory=dict)  # venv -> when its warm interpreter failed

    def warm_allowed(self, venv: str, now: float) -> bool:
        """Whether a start from ``venv`` tries a warm interpreter (else it starts cold)."""
        failed = self.failed.get(venv)
        return failed is None or now - failed > RETRY_AFTER_S

    def failed_at(self, venv: str, now: float) -> None:
        """``venv``'s warm interpreter could not be used: its starts go cold for a while."""
        self.failed[venv] = now

    def opened(self, key: Key, interpreter: S, now: float) -> list[S]:
        """``interpreter`` serves ``key`` from now on; returns the idle ones to close (no longer served)."""
        self.serving[key] = interpreter
        idle = [k for k, other in self.serving.items()
                if k != key and not other.children and now - other.last_used > IDLE_AFTER_S]
        return [self.serving.pop(k) for k in idle]

    def forget(self, key: Key, interpreter: S) -> None:
        """``interpreter`` serves no more, unless a newer one another start made serves ``key`` now."""
        if self.serving.get(key) is interpreter:
            del self.serving[key]

    def retire(self, interpreter: S) -> bool:
        """A stale ``interpreter``: it starts no more nodes and ends with its last; False if retired already."""
        if interpreter in self.retired:
            return False
        self.retired.add(interpreter)
        return True

    def ended(self, interpreter: S) -> None:
        """A retired interpreter's last node ended, and so did it."""
        self.retired.discard(interpreter)

    def close_all(self) -> list[S]:
        """The runtime stops: every interpreter, serving or retired, to close."""
        every = [*self.serving.values(), *self.retired]
        self.serving, self.retired = {}, set()
        return every
