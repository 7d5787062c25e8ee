"""What the core asks its drivers to do: each effect a plain value, carried out in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from tatolab._control.errors import ControlError, Reason


@dataclass(frozen=True)
class Refuse:
    """Answer the command with this error; nothing after it is done."""

    error: ControlError


@dataclass(frozen=True)
class RefuseDamaged:
    """Refuse: the record of ``name`` is damaged and cannot be ``what`` (its own words and fixes)."""

    name: str
    what: str


@dataclass(frozen=True)
class Unknown:
    """Refuse: no stream ``name`` here (the refusal lists the streams there are)."""

    name: str


@dataclass(frozen=True)
class LoadFailed:
    """A kept stream could not load from its record (it is marked failed already)."""

    name: str
    reason: Reason


@dataclass(frozen=True)
class Superseded:
    """The start is no longer wanted (its record changed meanwhile); ``current``: the version running
    under that name instead, if any."""

    current: int | None


@dataclass(frozen=True)
class Snapshot:
    """`run -d`: copy the project's modules for version ``version`` (it may still refuse: nothing has
    changed yet)."""

    version: int


@dataclass(frozen=True)
class Unload:
    """Stop version ``version`` completely (its nodes, its rings), for ``reason``."""

    version: int
    reason: Reason
    by_runtime: bool = False


@dataclass(frozen=True)
class WriteRecord:
    """`run -d`: write the kept record of version ``version`` (it may still refuse: a full disk)."""

    version: int


@dataclass(frozen=True)
class WriteMarker:
    """Write the runtime marker as ``state`` says (the two-crash rule's: rules/crashes.py)."""

    state: dict[str, Any]
    clean: bool = False  # the clean stop's: if it cannot be written, remove the marker


@dataclass(frozen=True)
class MarkFailed:
    """Record kept stream ``name`` as failed, for ``reason``, and say so."""

    name: str
    reason: Reason


@dataclass(frozen=True)
class SetStopped:
    name: str
    stopped: bool


@dataclass(frozen=True)
class Forget:
    """Remove the kept record of ``name`` and its copy of sources."""

    name: str


@dataclass(frozen=True)
class StartNodes:
    """Make version ``version``'s rings and start its nodes (it may fail: ``Streams.start_failed``)."""

    version: int


@dataclass(frozen=True)
class RestartNodes:
    """A dev reload in place: restart ``why``'s nodes of version ``version`` from its new graph (each
    with why: rules/reload.py), and keep the others (``kept``) with every ring."""

    version: int
    why: dict[str, str]
    kept: list[str]


@dataclass(frozen=True)
class Say:
    level: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """The command's answer."""

    value: Any


Effect = Union[Refuse, RefuseDamaged, Unknown, LoadFailed, Superseded, Snapshot, Unload, WriteRecord, WriteMarker,
               MarkFailed, SetStopped, Forget, StartNodes, RestartNodes, Say, Reply]
