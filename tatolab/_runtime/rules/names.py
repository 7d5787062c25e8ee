"""Who may take a stream's name: the rule every load (run, run -d, dev, a reload) goes through."""

from __future__ import annotations

from dataclasses import dataclass

from tatolab._control.errors import ControlError, Fix


@dataclass(frozen=True)
class Recorded:
    """A kept stream's record of that name: it holds the name even while stopped or failed."""

    project: str
    state: str  # kept | stopped | failed
    damaged: bool = False


@dataclass(frozen=True)
class Loaded:
    """A loaded stream of that name (not the one being replaced)."""

    project: str
    mode: str  # attached | kept


def _another_name() -> Fix:
    return Fix("load", {"name": None}, "load this one under another name")


def refusal(name: str, *, record: Recorded | None, loaded: Loaded | None,
            keeping_from: str | None = None) -> ControlError | None:
    """Why ``name`` cannot be taken, or None. Only `run -d` from the record's own project
    (``keeping_from``) may replace a kept stream's record; a damaged record yields to it too."""
    if record is not None and not (keeping_from is not None and (record.damaged or record.project == keeping_from)):
        return ControlError(
            f"a stream named {name} is kept from {record.project} ({record.state}); a kept stream holds its "
            "name even while stopped",
            code="name_kept", fixes=[Fix("rm", {"name": name}, "remove it first"), _another_name()],
        )
    if loaded is None:
        return None
    if loaded.mode == "kept":
        return ControlError(
            f"a stream named {name} is kept from {loaded.project}; a kept stream holds its name",
            code="name_kept", fixes=[Fix("rm", {"name": name}, "remove it first"), _another_name()],
        )
    return ControlError(
        f"a stream named {name} is already loaded from {loaded.project} ({loaded.mode})",
        code="name_loaded", fixes=[Fix("stop", {"name": name}, "stop it"), _another_name()],
    )
