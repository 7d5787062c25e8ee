"""The messages between the runtime and a warm interpreter (tatolab/_host/warm.py, started and
used by tatolab/_runtime/processes/starter.py), one JSON object per SOCK_SEQPACKET message, the
descriptors it names attached.

The runtime asks ``Spawn``; the interpreter answers ``Ready`` once, then per request ``Spawned``
(the child's pidfd attached), ``Refused`` or ``Stale``, and ``Exited`` when a child ends. Which
reply it is shows in its keys (the wire is what it was before these types: an interpreter of a
project's ``.venv`` may hold another tatolab than the runtime's), so ``read_reply`` picks the
type by key and msgspec checks the rest. What does not fit is a ``WarmMessageProblem`` naming the
message, the field and the fix.
"""

from __future__ import annotations

from typing import Union

import msgspec

from tatolab._model.fit import fit_problem

# the fix for a message that does not fit: the interpreter runs the project's .venv's tatolab
SAME_TATOLAB = ("the project's .venv holds another tatolab than the runtime's: `tatolab sdk <project>` puts the "
                "runtime's own there (its nodes start cold meanwhile)")


class Spawn(msgspec.Struct, kw_only=True):
    """Run ``python -m module args`` (module ``-c``: ``python -c args[0] args[1:]``) in a fresh child."""

    id: int
    python: str  # what the child's command line shows as its interpreter
    module: str
    args: list[str]
    cwd: str
    env: dict[str, str]  # the child's whole environment
    targets: list[int]  # the numbers the attached descriptors get in the child, in order


class Ready(msgspec.Struct):
    ready: int  # the interpreter's pid


class Spawned(msgspec.Struct):
    id: int
    pid: int  # the child's pidfd attached


class Refused(msgspec.Struct):
    id: int
    error: str  # why no child was made (a fork that failed, a request that did not fit)


class Stale(msgspec.Struct):
    id: int
    stale: str  # what changed since the interpreter imported it: the runtime starts a fresh one


class Exited(msgspec.Struct):
    exit: int  # the child's pid
    code: int  # its exit status (negative: the signal that killed it)


Reply = Union[Ready, Spawned, Refused, Stale, Exited]
_BY_KEY: tuple[tuple[str, type[Reply]], ...] = (  # the key only that reply has
    ("ready", Ready), ("exit", Exited), ("pid", Spawned), ("stale", Stale), ("error", Refused))


class WarmMessageProblem(OSError):
    """A message between the runtime and a warm interpreter that does not fit: the text names it and the fix."""


def encode(message: Spawn | Reply) -> bytes:
    return msgspec.json.encode(message)


def read_request(data: bytes) -> Spawn:
    """The runtime's request, or WarmMessageProblem (with ``.id`` when the request had a number)."""
    try:
        return msgspec.json.decode(data, type=Spawn)
    except msgspec.DecodeError as exc:
        problem = fit_problem(exc) if isinstance(exc, msgspec.ValidationError) else f"it is not JSON ({exc})"
        raise WarmMessageProblem(f"the warm interpreter cannot read the runtime's request {_shown(data)}: "
                                 f"{problem}; {SAME_TATOLAB}") from None


def request_id(data: bytes) -> int | None:
    """The number of a request that does not fit, so the runtime's asker gets the refusal."""
    try:
        found = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    value = found.get("id") if isinstance(found, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_reply(data: bytes) -> Reply:
    """A warm interpreter's reply, or WarmMessageProblem naming it, what does not fit and the fix."""
    try:
        found = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise WarmMessageProblem(f"a warm interpreter's message {_shown(data)} is not JSON ({exc}); "
                                 f"{SAME_TATOLAB}") from None
    kind = next((kind for key, kind in _BY_KEY if isinstance(found, dict) and key in found), None)
    if kind is None:
        raise WarmMessageProblem(f"a warm interpreter's message {_shown(data)} is none of its replies (it has "
                                 f"none of the keys {', '.join(key for key, _ in _BY_KEY)}); {SAME_TATOLAB}")
    try:
        return msgspec.convert(found, kind)
    except msgspec.ValidationError as exc:
        raise WarmMessageProblem(f"a warm interpreter's {kind.__name__} message {_shown(data)} does not fit: "
                                 f"{fit_problem(exc)}; {SAME_TATOLAB}") from None


def _shown(data: bytes, most: int = 200) -> str:
    text = data.decode(errors="replace")
    return text if len(text) <= most else f"{text[:most]}..."
