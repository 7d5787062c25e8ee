"""Who may read an output, and whether a remote link can be wired: plain decisions, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol

from tatolab._control.errors import Fix, Reason
from tatolab._graph import Graph
from tatolab._naming import Address, format_address

LEVELS = ("internal", "private", "public")


class SourceView(Protocol):
    """What the decision needs to know about a stream that might be a link's source (read only: a
    frozen ``Source`` is one)."""

    @property
    def running(self) -> bool: ...

    @property
    def state(self) -> str: ...

    def has_output(self, node: str, port: str) -> bool: ...

    def exposure(self, node: str, port: str) -> str: ...


@dataclass(frozen=True)
class Source:
    """A stream as a possible source, as plain values (wiring.py makes one of each stream)."""

    state: str  # attached | kept | stopped | failed
    running: bool = False
    levels: Mapping[tuple[str, str], str | None] = field(default_factory=dict)  # each output -> its level

    def has_output(self, node: str, port: str) -> bool:
        return (node, port) in self.levels

    def exposure(self, node: str, port: str) -> str:
        return self.levels.get((node, port)) or "internal"


@dataclass(frozen=True)
class Resolution:
    wired: bool
    reason: Reason | None = None

    @property
    def state(self) -> str:
        return "wired" if self.wired else "waiting"


def exposure_levels(graph: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """Each output's level from a compiled graph; outputs not listed are internal."""
    return {(e["node"], e["port"]): e["level"] for e in graph.get("exposures", [])}


def set_level(graph: Graph, node: str, port: str, level: Literal["internal", "private", "public"]) -> None:
    """Record ``level`` for an output in a compiled graph (internal ones are not listed)."""
    entries = [e for e in graph.get("exposures", []) if (e["node"], e["port"]) != (node, port)]
    if level != "internal":
        entries.append({"node": node, "port": port, "level": level})
    graph["exposures"] = entries


def resolve(address: Address, this_machine: str, sources: Mapping[str, SourceView]) -> Resolution:
    """Can a reader on this machine read ``address`` now? If not, why (the link's ``waiting`` reason)."""
    text = format_address(address._replace(machine=None))
    if address.machine and address.machine != this_machine:
        return Resolution(False, Reason(f"{format_address(address)} is on another machine ({address.machine}); "
                                        "read it over MoQ by the URL its machine's runtime serves it at: "
                                        "stream_builder.remote_output(\"https://...\")"))
    source = sources.get(address.stream)
    if source is None:
        return Resolution(False, Reason(f"no stream named {address.stream} is loaded on this machine"))
    if not source.running:
        state = "being loaded" if source.state == "kept" else source.state
        return Resolution(False, Reason(f"stream {address.stream} is not running ({state})"))
    if not source.has_output(address.node, address.port):
        return Resolution(False, Reason(f"stream {address.stream} has no output {address.node}/{address.port}"))
    level = source.exposure(address.node, address.port)
    if level == "internal":
        return Resolution(False, Reason(f"{text} is internal: only its own stream reads it. Expose it with "
                                        f"stream_builder.expose(...) in {address.stream}'s stream function",
                                        code="internal", fixes=(Fix("expose", {"address": text}, "exposes it"),)))
    return Resolution(True)
