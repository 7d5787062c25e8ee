"""Audio blocks: the audio bag (samples inline) and ``AudioBlock``, its numpy view.

An audio bag carries its samples inline, interleaved, as bytes::

    {"samples": b"...", "sample_rate": 48000, "channels": 2, "format": "f32",
     "frames": 480, "first_sample_timestamp_ns": 123456789}

``first_sample_timestamp_ns`` is on the machine's monotonic clock, like every timestamp in a
stream. ``ctx.inputs.read(port, into=AudioBlock)`` gives the block with ``samples`` as a
(frames, channels) numpy array of the format's dtype; ``ctx.outputs.write(port, block)`` sends it.

``AudioShape`` is what an input asks for with ``@node.input(..., audio={...})``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMATS = {"s16": "int16", "f32": "float32"}  # format -> numpy dtype name
SAMPLE_BYTES = {"s16": 2, "f32": 4}
BAG_KEYS = ("samples", "sample_rate", "channels", "format", "frames", "first_sample_timestamp_ns")
MAX_CHANNELS = 32
MAX_RATE = 384_000


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # the SDK itself needs only msgspec; audio as arrays needs numpy
        raise ImportError(
            "AudioBlock gives samples as a numpy array, and numpy is not installed in this environment. "
            "Add it to the project: uv add numpy"
        ) from None
    return numpy


def _whole(name: str, value: Any, low: int, high: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number of {unit} from {low} to {high}, got {value!r}")
    return value


def check_format(value: Any) -> str:
    if value not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)} (16-bit integers, 32-bit floats), got {value!r}")
    return str(value)


@dataclass
class AudioBlock:
    """Audio samples with their rate, format and the monotonic time of the first one.

    ``samples`` is a (frames, channels) numpy array: int16 for ``s16``, float32 for ``f32``
    (-1.0 to 1.0). Read from a bag it is a read-only view of the bag's bytes (no copy)."""

    samples: Any
    sample_rate: int
    first_sample_timestamp_ns: int
    fields: dict[str, Any] = field(default_factory=dict)  # anything else the bag carried

    def __post_init__(self) -> None:
        np = _numpy()
        samples = self.samples
        if not isinstance(samples, np.ndarray):
            raise ValueError(f"samples must be a numpy array of shape (frames, channels), got {type(samples).__name__}")
        if samples.ndim == 1:
            samples = samples.reshape(-1, 1)
        if samples.ndim != 2:
            raise ValueError(f"samples must have shape (frames, channels), got shape {samples.shape}")
        if samples.dtype not in (np.int16, np.float32):
            raise ValueError(
                f"samples must be int16 (format s16) or float32 (format f32), got {samples.dtype}; "
                "convert with samples.astype(numpy.float32)"
            )
        _whole("channels", samples.shape[1], 1, MAX_CHANNELS, "channels")
        _whole("sample_rate", self.sample_rate, 1, MAX_RATE, "samples a second")
        self.samples = samples
        self.first_sample_timestamp_ns = int(self.first_sample_timestamp_ns)

    @property
    def format(self) -> str:
        return "s16" if self.samples.dtype == _numpy().int16 else "f32"

    @property
    def channels(self) -> int:
        return int(self.samples.shape[1])

    @property
    def frames(self) -> int:
        return int(self.samples.shape[0])

    @property
    def duration_ns(self) -> int:
        return self.frames * 1_000_000_000 // self.sample_rate

    def bag(self) -> dict[str, Any]:
        return {
            **self.fields,
            "samples": self.samples.tobytes(),  # C order: interleaved
            "sample_rate": self.sample_rate,
            "channels": self.channels,
            "format": self.format,
            "frames": self.frames,
            "first_sample_timestamp_ns": self.first_sample_timestamp_ns,
        }

    # the hook ctx.outputs.write uses
    def _tatolab_bag(self) -> dict[str, Any]:
        return self.bag()

    # the hook ctx.inputs.read(port, into=AudioBlock) uses
    @classmethod
    def _tatolab_from_bag(cls, bag: dict[str, Any]) -> AudioBlock:
        return cls.from_bag(bag)

    @classmethod
    def from_bag(cls, bag: dict[str, Any]) -> AudioBlock:
        """The block an audio bag carries; a ValueError naming the missing or wrong field otherwise."""
        if not isinstance(bag, dict):
            raise ValueError(f"an audio bag is a dict, got {type(bag).__name__}")
        missing = [key for key in BAG_KEYS if key not in bag]
        if missing:
            raise ValueError(
                f"not an audio bag: it lacks {', '.join(missing)} (it has {', '.join(sorted(bag)) or 'nothing'})"
            )
        fmt = check_format(bag["format"])
        channels = _whole("channels", bag["channels"], 1, MAX_CHANNELS, "channels")
        rate = _whole("sample_rate", bag["sample_rate"], 1, MAX_RATE, "samples a second")
        frames = bag["frames"]
        data = bag["samples"]
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"an audio bag's samples must be bytes, got {type(data).__name__}")
        expected = frames * channels * SAMPLE_BYTES[fmt] if isinstance(frames, int) else -1
        if len(data) != expected:
            raise ValueError(
                f"an audio bag of {frames!r} frames of {channels} {fmt} channels holds {expected} bytes of samples, "
                f"this one {len(data)}"
            )
        np = _numpy()
        samples = np.frombuffer(data, dtype=FORMATS[fmt]).reshape(frames, channels)
        return cls(samples, rate, bag["first_sample_timestamp_ns"],
                   {k: v for k, v in bag.items() if k not in BAG_KEYS})

    def __repr__(self) -> str:
        return (f"<AudioBlock {self.frames} frames x {self.channels} {self.format} at {self.sample_rate} Hz "
                f"t={self.first_sample_timestamp_ns}>")


@dataclass(frozen=True)
class AudioShape:
    """What an audio input asks for: blocks of ``window_ms`` at ``sample_rate``, ``channels``, ``format``."""

    sample_rate: int
    channels: int
    format: str
    window_ms: float

    @property
    def window_frames(self) -> int:
        return int(round(self.sample_rate * self.window_ms)) // 1000  # a whole number: checked in parse

    @classmethod
    def parse(cls, value: Any, where: str) -> AudioShape:
        """``value`` as given to ``@node.input(audio=...)``; a ValueError starting with ``where``."""
        example = '{"sample_rate": 16000, "channels": 1, "format": "f32", "window_ms": 20}'
        if isinstance(value, AudioShape):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{where}: audio= takes a dict like {example}, got {value!r}")
        unknown = sorted(set(value) - {"sample_rate", "channels", "format", "window_ms"})
        missing = [k for k in ("sample_rate", "channels", "format", "window_ms") if k not in value]
        if unknown or missing:
            what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r}"
            raise ValueError(f"{where}: audio= has {what}; it takes {example}")
        try:
            rate = _whole("sample_rate", value["sample_rate"], 1000, MAX_RATE, "samples a second")
            channels = _whole("channels", value["channels"], 1, MAX_CHANNELS, "channels")
            fmt = check_format(value["format"])
            window = value["window_ms"]
            if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window <= 10_000:
                raise ValueError(f"window_ms must be a number of milliseconds above 0 and at most 10000, got {window!r}")
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if (rate * window) % 1000:
            raise ValueError(
                f"{where}: a {window} ms window at {rate} Hz is {rate * window / 1000} samples; "
                "choose a window that is a whole number of samples (at 16000 Hz: 10, 20 or 30 ms)"
            )
        if int(window) == window:
            window = int(window)
        return cls(rate, channels, fmt, window)

    def as_dict(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate, "channels": self.channels, "format": self.format,
                "window_ms": self.window_ms}
