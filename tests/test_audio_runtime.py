"""Audio through a running stream: shaping over a minute of audio, Opus built-ins, and a private
PulseAudio (started by the test) as the machine's microphone and speaker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pulse
from pulse import TONE
from harness import graph_node, make_project, read_jsonl, wait_for

pytestmark = pytest.mark.slow

NS = 1_000_000_000

# Writes a minute (and a little) of a 1 kHz tone, 48 kHz stereo s16, as fast as the consumer
# takes it: never more than a second of audio (about 60 bags; a ring holds 128) ahead of what
# the consumer reports, so the ordered link never laps it. Blocks of uneven sizes, stamped from
# the sample count.
PRODUCER = '''
import os, threading
import numpy as np
from tatolab.stream import AudioBlock, node

NS = 1_000_000_000
RATE = 48000
TOTAL = RATE * 60 + RATE // 10
SIZES = [480, 441, 1024, 7, 2000]


def consumed() -> int:
    try:
        return int(open("progress").read() or 0)
    except (OSError, ValueError):
        return 0


@node(execution="manual")
class Producer:
    @node.output()
    def audio(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.stop = threading.Event()
        threading.Thread(target=self.run, args=(ctx,), daemon=True).start()

    def teardown(self, ctx) -> None:
        self.stop.set()

    def run(self, ctx) -> None:
        start = ctx.time
        open("start", "w").write(str(start))
        t = np.arange(TOTAL) / RATE
        left = np.rint(0.5 * 32767 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
        samples = np.stack([left, left], axis=1)
        at = k = 0
        while at < TOTAL and not self.stop.is_set():
            # the consumer's windows are 20 ms: 960 of our frames each
            while at - consumed() * 960 > RATE and not self.stop.is_set():
                self.stop.wait(0.005)
            size = min(SIZES[k % len(SIZES)], TOTAL - at)
            ctx.outputs.write("audio", AudioBlock(samples[at:at + size], RATE, start + at * NS // RATE))
            at += size
            k += 1
        open("sent", "w").write(str(at))
'''

CONSUMER = '''
import json
import numpy as np
from tatolab.stream import AudioBlock, node


@node
class Listener:
    @node.input(delivery_profile="ordered", audio={"sample_rate": 16000, "channels": 1, "format": "f32", "window_ms": 20})
    def audio(self) -> dict: ...

    def setup(self, ctx) -> None:
        self.count = 0
        self.rows = open("windows.jsonl", "a")
        self.samples = open("windows.f32", "ab")

    def process(self, ctx) -> None:
        while (block := ctx.inputs.read("audio", into=AudioBlock)) is not None:
            self.rows.write(json.dumps({"t": block.first_sample_timestamp_ns, "shape": list(block.samples.shape),
                                        "dtype": str(block.samples.dtype), "rate": block.sample_rate}) + "\\n")
            self.samples.write(block.samples.tobytes())
            self.count += 1
        self.rows.flush()
        self.samples.flush()
        with open("progress.tmp", "w") as f:
            f.write(str(self.count))
        import os
        os.replace("progress.tmp", "progress")
'''


def test_a_48k_stereo_producer_reaches_a_16k_mono_20ms_consumer_exactly_over_a_minute(runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "shaping", video_venv, {
        "stream.py": '''
            from tatolab.stream import StreamBuilder, stream
            from nodes.producer import Producer
            from nodes.listener import Listener


            @stream
            def shaping(stream_builder: StreamBuilder) -> None:
                producer = stream_builder.add(Producer, name="producer")
                listener = stream_builder.add(Listener, name="listener")
                stream_builder.connect(producer.output("audio"), listener.input("audio"))
        ''',
        "nodes/__init__.py": "",
        "nodes/producer.py": PRODUCER,
        "nodes/listener.py": CONSUMER,
    })
    runtime.popen_cli("run", cwd=project)
    wait_for(lambda: (project / "sent").exists(), timeout=150, what="the producer to send a minute of audio")
    wait_for(lambda: len(read_jsonl(project / "windows.jsonl")) >= 3000, timeout=60,
             what="3000 windows (a minute) at the consumer")
    start = int((project / "start").read_text())
    rows = read_jsonl(project / "windows.jsonl")[:3000]
    assert {(tuple(r["shape"]), r["dtype"], r["rate"]) for r in rows} == {((320, 1), "float32", 16000)}
    assert [r["t"] for r in rows] == [start + k * 20_000_000 for k in range(3000)]
    mono = np.fromfile(project / "windows.f32", dtype=np.float32)[:3000 * 320]
    spectrum = np.abs(np.fft.rfft(mono[16000:32000]))
    assert np.fft.rfftfreq(16000, 1 / 16000)[np.argmax(spectrum)] == 1000
    listener = graph_node(runtime, "shaping", "listener")
    assert listener["inputs"][0]["dropped"] == 0 and listener["inputs"][0]["bad"] == 0


DECODED = '''
import json
from tatolab.stream import AudioBlock, node


@node
class Decoded:
    @node.input(delivery_profile="ordered")
    def audio(self) -> dict: ...

    def process(self, ctx) -> None:
        while (block := ctx.inputs.read("audio", into=AudioBlock)) is not None:
            with open("decoded.s16", "ab") as f:
                f.write(block.samples.tobytes())
            with open("decoded.jsonl", "a") as f:
                f.write(json.dumps({"t": block.first_sample_timestamp_ns, "frames": block.frames,
                                    "channels": block.channels, "format": block.format}) + "\\n")
'''

PACKETS = '''
import json
from tatolab.stream import node


@node
class Packets:
    @node.input(delivery_profile="ordered")
    def packets(self) -> dict: ...

    def process(self, ctx) -> None:
        while (bag := ctx.inputs.read("packets")) is not None:
            with open("packets.jsonl", "a") as f:
                f.write(json.dumps({k: bag[k] for k in ("codec", "timestamp_ns", "duration_ns", "sample_rate",
                                                       "channels", "encoder")}
                                   | {"bytes": len(bag["data"]), "head": bag["extradata"][:8].decode()}) + "\\n")
'''


def test_opus_encoder_and_decoder_built_ins_round_trip_a_tone(runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "opus", video_venv, {
        "stream.py": '''
            from tatolab.stream import OpusDecoder, OpusEncoder, StreamBuilder, stream
            from nodes.tone import Tone
            from nodes.decoded import Decoded
            from nodes.packets import Packets


            @stream
            def opus(stream_builder: StreamBuilder) -> None:
                tone = stream_builder.add(Tone, name="tone")
                encoder = stream_builder.add(OpusEncoder, name="encoder",
                                             config={"bitrate": 96000, "frame_ms": 20, "channels": 1})
                decoder = stream_builder.add(OpusDecoder, name="decoder")
                decoded = stream_builder.add(Decoded, name="decoded")
                packets = stream_builder.add(Packets, name="packets")
                stream_builder.connect(tone.output("audio"), encoder.input("audio"))
                stream_builder.connect(encoder.output("packets"), decoder.input("packets"))
                stream_builder.connect(encoder.output("packets"), packets.input("packets"))
                stream_builder.connect(decoder.output("audio"), decoded.input("audio"))
        ''',
        "nodes/__init__.py": "",
        "nodes/tone.py": TONE,
        "nodes/decoded.py": DECODED,
        "nodes/packets.py": PACKETS,
    })
    runtime.popen_cli("run", cwd=project)
    # two seconds of 20 ms frames; the encoder holds its last frame until more audio comes
    wait_for(lambda: len(read_jsonl(project / "packets.jsonl")) >= 99, timeout=90, what="99 Opus packets")
    wait_for(lambda: sum(r["frames"] for r in read_jsonl(project / "decoded.jsonl")) >= 48000 * 19 // 10,
             timeout=30, what="1.9 s of decoded audio")
    start = int((project / "start").read_text())
    packets = read_jsonl(project / "packets.jsonl")
    assert {(p["codec"], p["sample_rate"], p["channels"], p["encoder"], p["head"]) for p in packets} == {
        ("opus", 48000, 1, "libopus", "OpusHead")}
    assert packets[0]["timestamp_ns"] == start - 312 * NS // 48000  # libopus's pre-skip, 6.5 ms
    assert [p["timestamp_ns"] - packets[0]["timestamp_ns"] for p in packets[:99]] == [k * 20_000_000 for k in range(99)]
    assert all(p["duration_ns"] == 20_000_000 for p in packets[:99])
    rows = read_jsonl(project / "decoded.jsonl")
    assert rows[0]["t"] == start and {(r["channels"], r["format"]) for r in rows} == {(1, "s16")}
    decoded = np.fromfile(project / "decoded.s16", dtype=np.int16).astype(np.float32) / 32768
    sent = np.load(project / "sent.npy")
    middle = slice(24000, 72000)
    best = max(range(-200, 201), key=lambda lag: float(np.dot(decoded[middle.start + lag:middle.stop + lag],
                                                              sent[middle])))
    assert best == 0
    error = decoded[middle] - sent[middle]
    snr = 10 * np.log10(np.sum(sent[middle] ** 2) / np.sum(error ** 2))
    assert snr > 20, f"SNR {snr:.1f} dB"


# -- the machine's audio: a private PulseAudio -----------------------------------------------------

@pytest.fixture
def private_pulse(tmp_path: Path):  # asked for before `runtime`, so it outlives the stream's nodes
    why = pulse.available()
    if why:
        pytest.skip(why)
    server = pulse.Pulse(tmp_path / "pa", sink_rate=44100, tone_hz=440, source_rate=48000).start()
    yield server
    server.stop()


def unbroken(sound: np.ndarray, rate: int) -> tuple | None:
    """(the last quarter second of ``sound`` loud in every 10 ms of it,) within its last two seconds, or None."""
    size, step = rate // 4, rate // 100
    top = len(sound) - len(sound) % step
    for end in range(top, max(size - 1, top - 2 * rate), -step):
        part = sound[end - size:end]
        if min(np.sqrt(np.mean(part[k:k + step] ** 2)) for k in range(0, size, step)) > 0.1:
            return (part,)
    return None


def peak_hz(sound: np.ndarray, rate: int) -> float:
    """The loudest frequency, to a quarter of a hertz (the spectrum zero-padded to 4 s)."""
    spectrum = np.abs(np.fft.rfft(sound * np.hanning(len(sound)), n=4 * rate))
    return float(np.fft.rfftfreq(4 * rate, 1 / rate)[np.argmax(spectrum)])


STAMPS = '''
import json
from tatolab.stream import AudioBlock, node


@node
class Stamps:
    @node.input(delivery_profile="ordered")
    def audio(self) -> dict: ...

    def process(self, ctx) -> None:
        while (block := ctx.inputs.read("audio", into=AudioBlock)) is not None:
            with open("stamps.jsonl", "a") as f:
                f.write(json.dumps({"t": block.first_sample_timestamp_ns, "read_at": ctx.time, "frames": block.frames,
                                    "rate": block.sample_rate, "channels": block.channels}) + "\\n")
'''


def test_microphone_to_speaker_plays_the_tone_the_microphone_hears(private_pulse, runtime, video_venv, tmp_path):
    project = make_project(tmp_path / "loop", video_venv, {
        "stream.py": '''
            from tatolab.stream import MicrophoneSource, SpeakerSink, StreamBuilder, stream
            from nodes.stamps import Stamps


            @stream
            def loop(stream_builder: StreamBuilder) -> None:
                mic = stream_builder.add(MicrophoneSource, name="mic", config={"sample_rate": 48000, "channels": 1})
                speaker = stream_builder.add(SpeakerSink, name="speaker", config={"latency_ms": 100})
                stamps = stream_builder.add(Stamps, name="stamps")
                stream_builder.connect(mic.output("audio"), speaker.input("audio"))
                stream_builder.connect(mic.output("audio"), stamps.input("audio"))
        ''',
        "nodes/__init__.py": "",
        "nodes/stamps.py": STAMPS,
    })
    rate = private_pulse.sink_rate
    with private_pulse.record(tmp_path / "played.f32") as played:
        runtime.popen_cli("run", cwd=project, env={**runtime.env, **private_pulse.env})
        # a second of sound at the sink (the tone through mic, link and speaker, resampled 48 -> 44.1 kHz)
        # a quarter of a second of unbroken sound at the sink: the tone through mic, link and speaker,
        # resampled 48 -> 44.1 kHz (on a loaded machine the speaker may underrun now and then)
        (heard,) = wait_for(lambda: unbroken(pulse.recorded(played), rate), timeout=60,
                         what="a quarter of a second of unbroken sound at the null sink")
    assert abs(peak_hz(heard, rate) - 440) <= 1, f"the sink played {peak_hz(heard, rate):.1f} Hz"

    stamps = read_jsonl(project / "stamps.jsonl")
    assert {(s["rate"], s["channels"]) for s in stamps} == {(48000, 1)}
    start, count, breaks = stamps[0]["t"], 0, 0
    for stamp in stamps:  # exact from the sample count, unless the device's time parted from it
        if stamp["t"] != start + count * NS // 48000:
            start, count, breaks = stamp["t"], 0, breaks + 1
        count += stamp["frames"]
    # each break is a resync the microphone reports (a few times a second)
    wait_for(lambda: graph_node(runtime, "loop", "mic").get("metrics", {}).get("resyncs", 0) >= breaks, timeout=10,
             what=f"the microphone to report {breaks} resyncs")
    first = stamps[0]
    assert 0 <= first["read_at"] - first["t"] < 2 * NS  # captured on the monotonic clock, shortly before it was read
    speaker = graph_node(runtime, "loop", "speaker")
    assert speaker["state"] == "running" and speaker["restarts"] == 0
    assert isinstance(speaker["metrics"].get("underruns", 0), int)


def test_a_missing_microphone_is_waited_for_by_name_with_the_devices_there_are(private_pulse, runtime, video_venv,
                                                                              tmp_path):
    project = make_project(tmp_path / "nomic", video_venv, {
        "stream.py": '''
            from tatolab.stream import MicrophoneSource, SpeakerSink, StreamBuilder, stream


            @stream
            def nomic(stream_builder: StreamBuilder) -> None:
                mic = stream_builder.add(MicrophoneSource, name="mic", config={"device": "Studio Mic 7"})
                speaker = stream_builder.add(SpeakerSink, name="speaker")
                stream_builder.connect(mic.output("audio"), speaker.input("audio"))
        ''',
    })
    runtime.popen_cli("run", cwd=project, env={**runtime.env, **private_pulse.env})
    wait_for(lambda: runtime.cli("graph", "--stream", "nomic").returncode == 0, timeout=60, what="stream nomic listed")
    mic = wait_for(lambda: (lambda n: n if n.get("state") == "waiting" else None)(graph_node(runtime, "nomic", "mic")),
                   timeout=60, what="the microphone waiting for its device")
    text = mic["reason"]  # it may be plugged in later: the node waits for it, looking again every few seconds
    assert "there is no input device named 'Studio Mic 7'" in text
    assert "'pulse'" in text and "'default'" in text and "config device=" in text
    assert mic["restarts"] == 0 and mic["last_error"] is None
    assert graph_node(runtime, "nomic", "speaker")["state"] == "running"  # the rest goes on


def test_a_speaker_whose_audio_stops_counts_an_underrun_and_keeps_running(private_pulse, runtime, video_venv,
                                                                          tmp_path):
    project = make_project(tmp_path / "dry", video_venv, {
        "stream.py": '''
            from tatolab.stream import SpeakerSink, StreamBuilder, stream
            from nodes.tone import Tone


            @stream
            def dry(stream_builder: StreamBuilder) -> None:
                tone = stream_builder.add(Tone, name="tone")
                speaker = stream_builder.add(SpeakerSink, name="speaker")
                stream_builder.connect(tone.output("audio"), speaker.input("audio"))
        ''',
        "nodes/__init__.py": "",
        "nodes/tone.py": TONE,
    })
    with private_pulse.record(tmp_path / "played.f32") as played:
        runtime.popen_cli("run", cwd=project, env={**runtime.env, **private_pulse.env})
        wait_for(lambda: runtime.cli("graph", "--stream", "dry").returncode == 0, timeout=60, what="stream dry listed")
        # two seconds of tone, then nothing: the queue runs dry once
        speaker = wait_for(lambda: (lambda n: n if n.get("metrics", {}).get("underruns") else None)(
            graph_node(runtime, "dry", "speaker")), timeout=60, what="the speaker's underrun counted")
        rate = private_pulse.sink_rate
        # the sink played the two seconds, and then silence (parec hands the monitor's audio over in chunks)

        def tone_then_silence() -> tuple | None:
            sound = pulse.recorded(played)
            loud = np.flatnonzero(np.abs(sound) > 0.05)
            return (sound,) if len(loud) and len(sound) - loud[-1] > rate // 10 else None

        (sound,) = wait_for(tone_then_silence, timeout=30, what="the tone and the silence after it at the null sink")
    assert speaker["metrics"]["underruns"] >= 1  # the end of the tone (a loaded machine may add one mid-tone)
    assert speaker["state"] == "running" and speaker["restarts"] == 0 and speaker["last_error"] is None
    # all two seconds played: the tone's energy over its power (0.5² / 2 + 0.2² / 2); an underrun
    # mid-tone (a loaded machine) lets the audio stack under PortAudio (ALSA's pulse plugin) drop
    # what it held, so then only most of it must arrive
    played_s = np.sum(sound.astype(np.float64) ** 2) / rate / 0.145
    if speaker["metrics"]["underruns"] == 1:  # the edges (the device's start, the resampler's delay) may cost a few blocks
        assert played_s == pytest.approx(2.0, abs=0.1), speaker["metrics"]
    else:
        assert 1.6 <= played_s <= 2.05, speaker["metrics"]
