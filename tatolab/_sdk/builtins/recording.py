"""Recording built-ins as the SDK carries them: Mp4Sink, and McapSource (a recording played back)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node

if TYPE_CHECKING:
    from tatolab._sdk.context import RuntimeContextLimitedAccess


def _positive(name: str, value: Any, unit: str, high: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise ValueError(f"{name} must be a number of {unit} above 0 and at most {high:g}, or None, got {value!r}")


@dataclass
class Mp4SinkConfig:
    """``path``: the file (relative to the project). With rotation (``rotate_seconds`` and/or
    ``rotate_mb``) the files are ``<stem>-0001.mp4``, ``<stem>-0002.mp4``..., each starting at a
    keyframe once the current one is that long or that big; ``rotate_gap_ms``: also when the packets
    pause longer than that (a file per utterance, when only speech reaches the encoder).
    ``fragment_ms``: how much a file can lose if the stream or the runtime is killed."""

    path: str = "recording.mp4"
    rotate_seconds: float | None = None
    rotate_mb: float | None = None
    fragment_ms: int = 100
    rotate_gap_ms: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip() or self.path.endswith("/"):
            raise ValueError(f"path must name a file, such as 'recordings/camera.mp4', got {self.path!r}")
        _positive("rotate_seconds", self.rotate_seconds, "seconds", 7 * 24 * 3600)
        _positive("rotate_mb", self.rotate_mb, "megabytes", 1024 * 1024)
        _positive("rotate_gap_ms", self.rotate_gap_ms, "milliseconds", 24 * 3600 * 1000)
        if isinstance(self.fragment_ms, bool) or not isinstance(self.fragment_ms, int) \
                or not 10 <= self.fragment_ms <= 10_000:
            raise ValueError(f"fragment_ms must be a whole number of milliseconds from 10 to 10000, "
                             f"got {self.fragment_ms!r}")


@builtin("tatolab._builtins.recording:Mp4Sink")
@node
class Mp4Sink:
    """Records encoded-packet bags (H.264, H.265, Opus, AAC: what the encoders write) into one
    fragmented MP4, one track per link into ``tracks`` (connect several outputs to it: a fan-in),
    without encoding again. Tracks line up by ``timestamp_ns``. The file is written in fragments of
    about ``fragment_ms`` (100 ms), each on disk as soon as it is complete, so a stream or runtime
    that is killed leaves a playable file missing at most its last fragment. ``path`` names the
    file; ``rotate_seconds`` / ``rotate_mb`` / ``rotate_gap_ms`` start a new numbered file at the next
    keyframe."""

    @node.input(delivery_profile="ordered")
    def tracks(self) -> dict: ...

    def __init__(self, config: Mp4SinkConfig) -> None:
        self.config = config

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("Mp4Sink runs inside the runtime")


@dataclass
class McapSourceConfig:
    """``path``: an MCAP file (relative to the project), as ``tatolab record`` writes; ``address``:
    which channel (the recorded output's address; None when the file has one); ``speed``: 1.0 plays
    at the recorded pace, 2.0 twice as fast, 0 as fast as the readers take the bags; ``loop``: start
    again at the end; ``start``/``end``: seconds from the recording's first message."""

    path: str = "recording.mcap"
    address: str | None = None
    speed: float = 1.0
    loop: bool = False
    start: float | None = None
    end: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip() or self.path.endswith("/"):
            raise ValueError(f"path must name an MCAP file, such as 'recordings/camera.mcap', got {self.path!r}")
        if self.address is not None and (not isinstance(self.address, str) or not self.address):
            raise ValueError(f"address must be the recorded output's address (<stream>/<node>/<port>), "
                             f"got {self.address!r}")
        if isinstance(self.speed, bool) or not isinstance(self.speed, (int, float)) or not 0 <= self.speed <= 1000:
            raise ValueError(f"speed must be a number from 0 (as fast as read) to 1000 (1.0: as recorded), "
                             f"got {self.speed!r}")
        if not isinstance(self.loop, bool):
            raise ValueError(f"loop must be true or false, got {self.loop!r}")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"{name} must be a number of seconds from the recording's start (0 or more), "
                                 f"or None, got {value!r}")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end}) must come after start ({self.start})")


@builtin("tatolab._builtins.mcap_source:McapSource")
@node(execution="thread")
class McapSource:
    """Plays one channel of an MCAP recording (``tatolab record`` writes them) into the stream:
    ``bags`` carries the recorded bags as they were, frames as new ``VideoFrame`` surfaces with the
    recorded pixels and keys, audio as audio bags, so a recording stands in for a camera or a
    microphone. Paced by the recorded log times (``speed``); several McapSource nodes of a stream
    over one file start together and stay in step. A file that is not MCAP, or has no such
    channel, stops it at start with the path and the channels it found."""

    @node.output()
    def bags(self) -> dict: ...

    def __init__(self, config: McapSourceConfig) -> None:
        self.config = config

    def run(self, ctx: RuntimeContextLimitedAccess) -> None:  # runs in the node host, on its thread (tatolab/_builtins/mcap_source.py)
        raise RuntimeError("McapSource runs inside the runtime")
