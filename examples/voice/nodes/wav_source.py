import wave
from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class WavSourceConfig:
    path: str  # a 16-bit PCM WAV file, in the project
    block_ms: int = 10
    loop: bool = False  # play it again at the end; else silence follows, as from a quiet microphone


@node(execution="continuous", interval_ms=10)
class WavSource:
    """Plays a WAV file as a microphone would: audio blocks in real time, stamped from the sample
    count since the first (logged as started_ns), then silence once the file ends."""

    @node.output()
    def audio(self) -> dict: ...

    def __init__(self, config: WavSourceConfig) -> None:
        self.config = config

    def setup(self, ctx: RuntimeContextLimitedAccess) -> None:
        with wave.open(self.config.path, "rb") as wav:
            if wav.getsampwidth() != 2:
                raise ValueError(f"node {ctx.node}: {self.config.path} is not 16-bit PCM; "
                                 "convert it with ffmpeg -i in.wav -c:a pcm_s16le out.wav")
            self.rate, self.channels = wav.getframerate(), wav.getnchannels()
            self.pcm = wav.readframes(wav.getnframes())
        self.block = self.rate * self.config.block_ms // 1000  # frames a block
        self.bytes_per_frame = 2 * self.channels
        self.sent = 0  # frames written so far
        self.started_ns = ctx.time
        ctx.log.info(f"playing {self.config.path}", started_ns=self.started_ns, sample_rate=self.rate,
                     seconds=round(len(self.pcm) / self.bytes_per_frame / self.rate, 3))

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        # every block that is due by now: the pace is the sample count's, whatever the timer's jitter
        while self.started_ns + (self.sent + self.block) * 1_000_000_000 // self.rate <= ctx.time:
            offset = self.sent * self.bytes_per_frame
            if self.config.loop:
                offset %= len(self.pcm)
            samples = self.pcm[offset:offset + self.block * self.bytes_per_frame]
            samples += bytes(self.block * self.bytes_per_frame - len(samples))  # silence after the end
            ctx.outputs.write("audio", {
                "samples": samples, "sample_rate": self.rate, "channels": self.channels, "format": "s16",
                "frames": self.block,
                "first_sample_timestamp_ns": self.started_ns + self.sent * 1_000_000_000 // self.rate,
            })
            self.sent += self.block
