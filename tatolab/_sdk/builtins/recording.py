"""Recording built-ins as the SDK carries them: Mp4Sink."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tatolab._sdk.builtins.marks import builtin
from tatolab._sdk.nodes import node


def _positive(name: str, value: Any, unit: str, high: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise ValueError(f"{name} must be a number of {unit} above 0 and at most {high:g}, or None, got {value!r}")


@dataclass
class Mp4SinkConfig:
    """``path``: the file (relative to the project). With rotation (``rotate_seconds`` and/or
    ``rotate_mb``) the files are ``<stem>-0001.mp4``, ``<stem>-0002.mp4``..., each starting at a
    keyframe once the current one is that long or that big. ``fragment_ms``: how much a file can
    lose if the stream or the runtime is killed."""

    path: str = "recording.mp4"
    rotate_seconds: float | None = None
    rotate_mb: float | None = None
    fragment_ms: int = 100

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip() or self.path.endswith("/"):
            raise ValueError(f"path must name a file, such as 'recordings/camera.mp4', got {self.path!r}")
        _positive("rotate_seconds", self.rotate_seconds, "seconds", 7 * 24 * 3600)
        _positive("rotate_mb", self.rotate_mb, "megabytes", 1024 * 1024)
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
    file; ``rotate_seconds`` / ``rotate_mb`` start a new numbered file at the next keyframe."""

    @node.input(delivery_profile="ordered")
    def tracks(self) -> dict: ...

    def __init__(self, config: Mp4SinkConfig) -> None:
        self.config = config

    def process(self, ctx: Any) -> None:  # runs in the runtime's process for it, never here
        raise RuntimeError("Mp4Sink runs inside the runtime")
