"""How many nodes may run: at most TATOLAB_MAX_STREAM_NODES in one stream and TATOLAB_MAX_NODES on
the machine, all streams together. Each node is a process of its own (tens of MiB, descriptors, a
place in the surface pool), so a graph that grows without bound (an agent adding nodes in a loop)
is refused by name before it starves the machine and every other stream."""

from __future__ import annotations

from tatolab import _settings as settings
from tatolab._control.errors import ControlError, Fix

STREAM_SETTING = "TATOLAB_MAX_STREAM_NODES"
MACHINE_SETTING = "TATOLAB_MAX_NODES"


def refusal(stream: str, stream_nodes: int, others: int, *, adding: str | None = None) -> ControlError | None:
    """Why stream ``stream`` may not run ``stream_nodes`` nodes while other streams run ``others``, or None.
    ``adding``: the node a live `node add` would add (the words differ)."""
    per_stream = settings.value(STREAM_SETTING)
    per_machine = settings.value(MACHINE_SETTING)
    what = f"node {adding} cannot be added to stream {stream}" if adding else f"stream {stream} cannot start"
    if stream_nodes > per_stream:
        return ControlError(
            f"{what}: it would have {stream_nodes} nodes, and a stream may have at most {per_stream} "
            f"({STREAM_SETTING}); split it into streams linked by address, or set {STREAM_SETTING} higher for "
            "tatolabd and restart it", code="too_many_nodes",
            details={"stream": stream, "nodes": stream_nodes, "limit": per_stream, "setting": STREAM_SETTING})
    if stream_nodes + others > per_machine:
        return ControlError(
            f"{what}: this machine would run {stream_nodes + others} nodes, and it runs at most {per_machine} "
            f"({MACHINE_SETTING}, all streams together; {others} run in other streams now); stop a stream you "
            f"no longer need, or set {MACHINE_SETTING} higher for tatolabd and restart it", code="too_many_nodes",
            fixes=[Fix("streams", {}, "see what runs now")],
            details={"stream": stream, "nodes": stream_nodes + others, "limit": per_machine,
                     "setting": MACHINE_SETTING})
    return None
