"""What the ``graph`` operation answers (``tatolab graph``, the MCP tool), as docs/graph.md shows
it: the MCP server's JSON Schema for it is made from these, so agents get its real shape. Below
it, the views made from it: what ``slowest_paths`` answers (its MCP tool's output schema too),
and what ``tatolab top`` shows (its ``--json``), which reads the graph through this model.

Keys every answer has are required; keys present only sometimes (an exposed output's
``network``, a URL link's ``network_missed``, a stream listed but not loaded's ``reason``) are
the optional ones. ``views/graph.py`` builds it as plain dicts; new keys may appear within a
version, so readers ignore keys they do not know.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from tatolab._model.graph import Delivery, Execution

NodeStateName = Literal["starting", "loading", "running", "waiting", "restarting", "crashed", "failed", "stopped"]


class Times(TypedDict):
    """Percentiles (µs) over a window, and how many bags (or calls) it counted."""

    p50_us: float | None
    p90_us: float | None
    p99_us: float | None
    max_us: float | None
    bags: int


class InputView(TypedDict):
    """totals over the port's wired links (see links[].counters)"""

    port: str
    delivery_profile: Delivery
    read: int
    dropped: int
    bad: int


class InputViewMore(InputView, total=False):
    spin_us: float


class Tap(TypedDict, total=False):
    reader: int
    read: int
    dropped: int
    recording: str  # the recording whose reader it is
    foxglove: bool  # the Foxglove server's reader


class VideoNetwork(TypedDict, total=False):
    encoding: bool
    encodes: int
    frames_encoded: int
    frames_skipped: int
    encoder: str | None
    pid: int | None
    restarts: int
    last_error: str | None


class _NetworkKeys(TypedDict):
    readers: int
    bytes_sent: int
    bags_sent: int
    dropped: int
    reading: bool


class Network(_NetworkKeys, total=False):
    video: VideoNetwork


class _OutputKeys(TypedDict):
    port: str
    exposure: Literal["internal", "private", "public"]
    written: int | None
    last_bag_ns: int | None
    last_bag_age_ms: float | None
    taps: list[Tap]


class OutputView(_OutputKeys, total=False):
    network: Network  # an exposed output, while the relay runs


class _NodeKeys(TypedDict):
    name: str
    kind: str  # the Python class path (module:qualname)
    doc: str | None
    builtin: bool
    execution: Execution
    pid: int | None
    state: NodeStateName
    reason: str | None
    restarts: int
    last_error: str | None
    hung: bool
    busy_ms: float | None
    watchdog_ms: int | float | None
    memory_limit_mb: int | float | None
    hangs: int
    memory_restarts: int
    cpu_percent: float | None
    memory_bytes: int | None
    metrics: dict[str, Any]
    process: Times | None
    process_since_start: Times | None
    wait: Times | None
    inputs: list[InputViewMore]
    outputs: list[OutputView]


class NodeView(_NodeKeys, total=False):
    surfaces: str  # a node the surface pool refused: why, and the fix


class LinkEndView(TypedDict, total=False):
    node: str
    port: str
    address: str
    url: str  # its token left out


class LinkCounters(TypedDict):
    written: int
    read: int
    dropped: int
    bad: int
    behind: int | None
    reader: int
    reader_active: bool
    last_read_ns: int | None
    last_bag_ns: int | None
    last_bag_age_ms: float | None


class FixView(TypedDict):
    op: str  # the operation that fixes it
    args: dict[str, Any]  # its arguments (a value of null: the caller chooses one)
    does: str  # what doing it does, in words


class Why(TypedDict):
    """A reason as an operation can act on it (tatolab/_control/errors.py's Reason.to_wire)."""

    text: str
    code: str
    details: dict[str, Any]
    fixes: list[FixView]


_LinkKeys = TypedDict("_LinkKeys", {
    "key": str,
    "from": LinkEndView,
    "to": LinkEndView,
    "delivery_profile": Delivery | None,
    "state": Literal["wired", "waiting", "broken"],
    "reason": str | None,
    "counters": LinkCounters | None,
    "latency": Times | None,
    "latency_since_start": Times | None,
})


class LinkView(_LinkKeys, total=False):
    latency_resets: int
    latency_reason: str  # where the histogram cannot be read
    network_missed: int  # a link from a URL: bags its relay never handed over
    why: Why  # a waiting link's reason with its fix


class _PathKeys(TypedDict):
    to: str
    through: list[str]
    p50_us: float | None
    p90_us: float | None
    p99_us: float | None
    max_us: float | None
    bags: int
    since_start: Times


_PathFrom = TypedDict("_PathFrom", {"from": str | None})  # the origin output ("stream/node/port" in another stream)


class PathView(_PathKeys, _PathFrom, total=False):
    """A source-to-sink path, slowest (p99 over the last 10 s) first."""

    from_reason: str  # "from" is null: why


class _StreamKeys(TypedDict):
    name: str
    state: str  # as `tatolab streams` shows it: attached, kept, stopped, failed, ...
    project: str | None
    nodes: list[NodeView]
    links: list[LinkView]
    paths: list[PathView]


class StreamView(_StreamKeys, total=False):
    changes: list[dict[str, Any]]  # live changes since it loaded, oldest first
    changed_since_recorded: bool  # kept streams only
    reason: str | None  # a stream listed but not loaded (stopped or failed)
    why: Why


class Serving(TypedDict, total=False):
    serving: bool
    port: int | None
    why: str


class _RuntimeKeys(TypedDict):
    name: str  # this machine's name, the first part of a full address
    version: str
    pid: int


class RuntimeView(_RuntimeKeys, total=False):
    relay: Serving  # the MoQ relay, while it runs
    foxglove: Serving  # `tatolab foxglove`'s server


class Surfaces(TypedDict, total=False):
    slots: int
    in_use: int
    bytes: int
    budget_bytes: int
    exhausted: int
    holders: int
    holders_refused: int


class _GraphViewKeys(TypedDict):
    version: int
    runtime: RuntimeView
    now_ns: int
    surfaces: Surfaces | None
    streams: list[StreamView]


class GraphView(_GraphViewKeys, total=False):
    recordings: list[dict[str, Any]]  # `tatolab record` in progress (tatolab/_runtime/lifecycle/recordings.py)


class SlowestLink(TypedDict):
    """The link along a path whose bags waited longest before they were read (p99 of read age)."""

    key: str
    p50_us: float | None
    p99_us: float | None


class SlowestNode(TypedDict):
    """The node along a path whose process() calls took longest (p99)."""

    node: str
    process_p50_us: float | None
    process_p99_us: float | None
    wait_p50_us: float | None


class _StreamOf(TypedDict):
    stream: str  # the stream whose path it is


class _SlowKeys(_StreamOf):
    slowest_link: SlowestLink | None
    slowest_node: SlowestNode | None


class SlowPath(PathView, _SlowKeys, total=False):
    """A path as ``slowest_paths`` gives it: its stream, and where along it the time goes."""


class SlowestPaths(TypedDict):
    """What ``slowest_paths`` answers (docs/graph.md, "Where time goes"): slowest first."""

    paths: list[SlowPath]


SortKey = Literal["age", "proc", "cpu", "memory", "in", "out", "dropped", "name"]


class TopRow(TypedDict):
    """A node's row in ``tatolab top``: rates over the interval, ages and times over the last 10 s."""

    stream: str
    node: str
    state: NodeStateName
    cpu_percent: float | None
    memory_bytes: int | None
    in_per_s: float | None  # bags read per second (None: the first sample)
    out_per_s: float | None
    dropped_per_s: float | None
    input: str | None  # the link into it whose bags are oldest when read (p99)
    age_p50_us: float | None
    age_p99_us: float | None
    proc_p50_us: float | None
    proc_p99_us: float | None
    wait_p50_us: float | None


class TopPath(PathView, _StreamOf, total=False):
    """A path in ``tatolab top``: the graph's, with its stream."""


class TopView(TypedDict):
    """One screen of ``tatolab top``, as ``--json`` prints it."""

    interval_s: float
    sort: SortKey
    nodes: list[TopRow]
    paths: list[TopPath]
