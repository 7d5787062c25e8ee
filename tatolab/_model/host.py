"""What the runtime hands a node host (``python -m tatolab._host``), one JSON line each on its
stdin: first its ``HostSpec``, then control messages (``Stop``, ``AddLink``, ``RemoveLink``).

TypedDicts for the reason graph.py gives: the host indexes its spec as a dict, and the bytes on
the wire stay what ``json.dumps`` of them always was. ``read_spec`` is the decode the host does:
msgspec checks the line against ``HostSpec``, and a line that does not fit (a node host of
another tatolab than the runtime's, a hand-made line) is a ``SpecProblem`` naming the node, the
field and the fix, never a KeyError later.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict, Union

import msgspec

from tatolab._model.fit import fit_problem
from tatolab._model.graph import Audio, Delivery, Execution

# How a node host's process ends when its node can never run (CannotRun, a config that does not
# fit, a spec it cannot read): the runtime marks the node failed and does not restart it.
EXIT_CANNOT_RUN = 4


class LinkSpec(TypedDict, total=False):
    key: str  # the graph's link key: "<node>/<port>-><node>/<port>" (or "<address>->...")
    base: str  # the source output's ring
    reader_index: int  # the reader record this link reads through
    start: Literal["beginning", "now"]  # a remote link wired later reads from now on


class _InputSpec(TypedDict):
    delivery_profile: Delivery
    links: list[LinkSpec]


class InputSpec(_InputSpec, total=False):
    audio: Audio  # the audio blocks this input receives, shaped by the host (tatolab/_host/audio.py)
    spin_us: float  # its readers poll this long before sleeping (@node.input(spin_us=...))


class OutputSpec(TypedDict):
    base: str  # the ring this output writes


HostSpec = TypedDict("HostSpec", {
    "stream": str,
    "node": str,
    "class": str,  # module:Qualname (tatolab/_classpath.py)
    "config": dict[str, Any],
    "execution": Execution,
    "interval_ms": Union[float, None],
    "watchdog_ms": Union[float, None],
    "memory_limit_mb": Union[float, None],
    "status": Union[str, None],  # the status file the runtime's watchdog reads (status.py)
    "project": str,
    "sources": Union[str, None],  # a kept stream's copy of the project's modules
    "inputs": dict[str, InputSpec],
    "outputs": dict[str, OutputSpec],
    "surfaces": Union[str, None],  # the runtime's surface pool, where VideoFrame finds frames
    "builtin": bool,  # a built-in node: the runtime's own code, run by the runtime's interpreter
})


class Stop(TypedDict):
    op: Literal["stop"]  # run teardown and exit (closing stdin says the same)


class AddLink(TypedDict):
    op: Literal["add_link"]
    port: str
    link: LinkSpec


class RemoveLink(TypedDict):
    op: Literal["remove_link"]
    key: str


Message = Union[Stop, AddLink, RemoveLink]
STOP: Stop = {"op": "stop"}
_MESSAGES: dict[str | None, Any] = {"stop": Stop, "add_link": AddLink, "remove_link": RemoveLink}  # by op

# the fix for a spec or message this host cannot read: the runtime and the host are two tatolabs
SAME_TATOLAB = ("the project's .venv holds another tatolab than the runtime's: `tatolab sdk <project>` puts "
                "the runtime's own there, then start the stream again")


class SpecProblem(ValueError):
    """A spec or control line the node host cannot read: the text names the node, what does not fit, and the fix."""

    def __init__(self, text: str, *, stream: str | None = None, node: str | None = None) -> None:
        super().__init__(text)
        self.stream = stream
        self.node = node


def encode(message: HostSpec | Message) -> bytes:
    return (json.dumps(message) + "\n").encode()


def read_spec(line: bytes | str) -> HostSpec | Stop:
    """The first line a host reads: its spec, or ``Stop`` (asked to end before it began, or
    stdin closed); SpecProblem where the line is not one."""
    if not line.strip():
        return STOP
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise SpecProblem(f"the node host's spec is not JSON ({exc}); {SAME_TATOLAB}") from None
    if isinstance(data, dict) and data.get("op") == "stop":
        return STOP
    stream, node = (_text(data, "stream"), _text(data, "node")) if isinstance(data, dict) else (None, None)
    try:
        return msgspec.convert(data, HostSpec)
    except msgspec.ValidationError as exc:
        who = f"node {node}" + (f" of stream {stream}" if stream else "") if node else "a node host"
        raise SpecProblem(f"{who} cannot read the spec the runtime gave it: {fit_problem(exc)}; {SAME_TATOLAB}",
                          stream=stream, node=node) from None


def read_message(line: bytes | str, node: str) -> Message:
    """A control line after the spec, or SpecProblem naming ``node``, what does not fit and the fix."""
    try:
        data = json.loads(line)
        kind = _MESSAGES.get(data.get("op") if isinstance(data, dict) else None)
        if kind is None:
            raise SpecProblem(f"its op is {data.get('op') if isinstance(data, dict) else None!r}, not one of "
                              f"{', '.join(str(op) for op in _MESSAGES)}")
        return msgspec.convert(data, kind)  # type: ignore[no-any-return]
    except (ValueError, msgspec.ValidationError) as exc:
        problem = fit_problem(exc) if isinstance(exc, msgspec.ValidationError) else (
            str(exc) if isinstance(exc, SpecProblem) else f"it is not JSON ({exc})")
        raise SpecProblem(f"node {node} cannot read a control message from the runtime: {problem}; {SAME_TATOLAB}",
                          node=node) from None


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None
