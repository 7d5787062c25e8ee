"""Audio shaped on input: whatever a producer sends, blocks of exactly the shape an input asked for.

One ``AudioShaper`` per link into an input declared with ``@node.input(audio={...})``: it
converts each arriving block to float32, remixes its channels, resamples it with soxr's
streaming resampler and cuts windows of ``window_ms``. Timestamps come from sample counts, never
from the clock: block k of a run starts at ``start + k * window`` exactly, where ``start`` is the
first arriving block's ``first_sample_timestamp_ns``.

When the producer's timestamps run ahead of its sample count by more than ``FILL_AFTER_NS`` (it
lost samples, or its device skipped), the gap is filled with silence, up to ``MAX_FILL_NS``, so
the windows keep their exact times. A run ends (the resampler and the partial window are dropped)
on a longer gap, when the timestamps go back by more than ``GAP_TOLERANCE_NS``, or when the
producer's rate, channels or format change; the next run starts at the block that broke it.
Either way the shaper says so. Producers should stamp blocks from their sample count (as
MicrophoneSource does): a block stamped from the clock as it is written jitters.
"""

from __future__ import annotations

from typing import Any, Callable

from tatolab._hints import install_hint
from tatolab._sdk.audio import AudioBlock, AudioShape

GAP_TOLERANCE_NS = 50_000_000  # timestamps going back this far are taken as jitter
FILL_AFTER_NS = 20_000_000  # timestamps ahead of the count by more than this: silence fills the gap
MAX_FILL_NS = 1_000_000_000  # a longer gap starts a new run
NS = 1_000_000_000


def _libraries() -> tuple[Any, Any]:
    try:
        import numpy
        import soxr
    except ImportError as exc:
        raise ImportError(
            f"an input declared with audio={{...}} is shaped with numpy and soxr, and {exc.name} is not installed "
            f"in this environment. Add them to the project: {install_hint('numpy', 'soxr')}"
        ) from None
    return numpy, soxr


def remix(samples: Any, channels: int) -> Any:
    """(frames, n) float32 to (frames, ``channels``): down to mono by averaging, up from mono by copying,
    otherwise the first channels (cycled when there are fewer)."""
    np, _ = _libraries()
    have = samples.shape[1]
    if have == channels:
        return samples
    if channels == 1:
        return samples.mean(axis=1, keepdims=True, dtype=np.float32)
    return np.ascontiguousarray(samples[:, [k % have for k in range(channels)]])


def to_float(samples: Any) -> Any:
    np, _ = _libraries()
    if samples.dtype == np.int16:
        return samples.astype(np.float32) / 32768.0
    return samples.astype(np.float32, copy=False)


def from_float(samples: Any, fmt: str) -> Any:
    np, _ = _libraries()
    if fmt == "f32":
        return np.ascontiguousarray(samples, dtype=np.float32)
    return np.clip(np.rint(samples * 32767.0), -32768, 32767).astype(np.int16)


class AudioShaper:
    """Blocks of one producer in, windows of ``shape`` out (see the module's docstring)."""

    def __init__(self, shape: AudioShape, on_reset: Callable[[str], None] = lambda message: None) -> None:
        self.np, self.soxr = _libraries()
        self.shape = shape
        self.on_reset = on_reset
        self.window = shape.window_frames
        self.source: tuple[int, int, str] | None = None  # the producer's (rate, channels, format)
        self.start_ns = 0  # the run's first sample
        self.taken = 0  # the producer's frames taken in this run
        self.emitted = 0  # frames emitted in this run (whole windows)
        self.resampler: Any = None
        self.pending: list[Any] = []  # shaped frames not yet a whole window
        self.pending_frames = 0
        self.resets = 0
        self.fills = 0

    def push(self, block: AudioBlock) -> list[AudioBlock]:
        """The whole windows ``block`` completes (none, one or many)."""
        source = (block.sample_rate, block.channels, block.format)
        if self.source is None:
            self._begin(source, block.first_sample_timestamp_ns)
        elif source != self.source:
            rate, channels, fmt = self.source
            self._reset(f"the audio changed from {rate} Hz, {channels} channels, {fmt} to "
                        f"{block.sample_rate} Hz, {block.channels} channels, {block.format}", source, block)
        else:
            expected = self.start_ns + self.taken * NS // block.sample_rate
            off = block.first_sample_timestamp_ns - expected
            if off > MAX_FILL_NS:
                self._reset(f"a gap of {off / 1e6:.1f} ms in the audio", source, block)
            elif off > FILL_AFTER_NS:
                missing = off * block.sample_rate // NS
                self.taken += missing
                self.fills += 1
                self._shape(self.np.zeros((missing, self.shape.channels), self.np.float32))
                self.on_reset(f"a gap of {off / 1e6:.1f} ms in the audio: filled with silence")
            elif off < -GAP_TOLERANCE_NS:
                self._reset(f"the audio's timestamps went back {-off / 1e6:.1f} ms", source, block)
        self.taken += block.frames
        self._shape(remix(to_float(block.samples), self.shape.channels))
        return self._windows()

    def _shape(self, samples: Any) -> None:
        """Resample ``samples`` (float32, the input's channels already) into the pending frames."""
        if self.resampler is not None:
            samples = self.resampler.resample_chunk(samples)
        if len(samples):
            self.pending.append(samples)
            self.pending_frames += len(samples)

    def _windows(self) -> list[AudioBlock]:
        if self.pending_frames < self.window:
            return []
        np = self.np
        shaped = self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending)
        count = len(shaped) // self.window
        rate = self.shape.sample_rate
        out = []
        for k in range(count):
            part = shaped[k * self.window:(k + 1) * self.window]
            out.append(AudioBlock(from_float(part, self.shape.format), rate,
                                  self.start_ns + self.emitted * NS // rate))
            self.emitted += self.window
        rest = shaped[count * self.window:]
        self.pending = [rest] if len(rest) else []
        self.pending_frames = len(rest)
        return out

    def _begin(self, source: tuple[int, int, str], start_ns: int) -> None:
        self.source = source
        self.start_ns = start_ns
        self.taken = self.emitted = 0
        self.pending, self.pending_frames = [], 0
        rate = source[0]
        self.resampler = None if rate == self.shape.sample_rate else self.soxr.ResampleStream(
            rate, self.shape.sample_rate, self.shape.channels, dtype="float32", quality="HQ")

    def _reset(self, why: str, source: tuple[int, int, str], block: AudioBlock) -> None:
        dropped = self.pending_frames
        self.resets += 1
        self._begin(source, block.first_sample_timestamp_ns)
        self.on_reset(
            f"{why}: the windows start again at {block.first_sample_timestamp_ns} ns"
            + (f" ({dropped} shaped samples of an unfinished window dropped)" if dropped else "")
        )
