"""Audio without a runtime: the audio bag and AudioBlock, input shaping (soxr), Opus, device lookup."""

from __future__ import annotations

import numpy as np
import pytest

from tatolab import _bags
from tatolab._errors import BagError, GraphError, NodeDefinitionError
from tatolab._sdk.audio import AudioBlock, AudioShape
from tatolab._host.ports import InputPort, ShapedInputPort
from tatolab._sdk.context import Inputs
from tatolab._sdk.nodes import describe_node, node
from tatolab._sdk.shaping import FILL_AFTER_NS, AudioShaper
from tatolab.stream import AudioBlock as PublicAudioBlock

NS = 1_000_000_000
SPEECH = {"sample_rate": 16000, "channels": 1, "format": "f32", "window_ms": 20}


class ListReader:
    """A ring reader that hands out bags from a list (what InputPort reads through)."""

    def __init__(self, bags: list[dict]) -> None:
        self.items = [(_bags.encode(bag, "producer", "audio"), k) for k, bag in enumerate(bags)]
        self.bad = 0

    def read(self):
        return self.items.pop(0) if self.items else None

    def read_many(self):
        taken, self.items = self.items, []
        return taken

    def discard(self, n: int = 1) -> None: ...

    def count_bad(self) -> None:
        self.bad += 1


def tone(rate: int, seconds: float, hz: float, channels: int = 2, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    return np.repeat(mono[:, None], channels, axis=1)


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def as_s16(samples: np.ndarray) -> np.ndarray:
    return np.rint(samples * 32767).astype(np.int16)


# -- the bag and AudioBlock ---------------------------------------------------------------------

def test_an_audio_bag_carries_its_samples_inline_and_reads_back_as_a_numpy_view():
    samples = as_s16(tone(48000, 0.01, 1000))
    block = AudioBlock(samples, 48000, 123_456_789, {"source": "mic"})
    bag = block.bag()
    assert bag == {"source": "mic", "samples": samples.tobytes(), "sample_rate": 48000, "channels": 2,
                   "format": "s16", "frames": 480, "first_sample_timestamp_ns": 123_456_789}
    _bags.encode(bag, "n", "p")  # a plain bag: bytes and numbers only

    port = InputPort("audio", "ordered")
    port.add_link("a", ListReader([bag]))
    read = Inputs("n", {"audio": port}).read("audio", into=PublicAudioBlock)
    assert read.samples.shape == (480, 2) and read.samples.dtype == np.int16
    assert not read.samples.flags.writeable
    assert np.array_equal(read.samples, samples)
    assert (read.sample_rate, read.channels, read.format, read.frames) == (48000, 2, "s16", 480)
    assert read.first_sample_timestamp_ns == 123_456_789 and read.fields == {"source": "mic"}

    f32 = AudioBlock(tone(16000, 0.02, 440, channels=1), 16000, 5).bag()
    assert (f32["format"], f32["channels"], f32["frames"], len(f32["samples"])) == ("f32", 1, 320, 320 * 4)


def test_a_bag_that_is_not_audio_read_into_audioblock_names_what_it_lacks():
    port = InputPort("audio", "ordered")
    port.add_link("a", ListReader([{"samples": b"\0\0", "sample_rate": 48000}]))
    with pytest.raises(BagError, match="input audio|port audio") as raised:
        Inputs("listener", {"audio": port}).read("audio", into=AudioBlock)
    assert "channels, format, frames, first_sample_timestamp_ns" in str(raised.value)
    with pytest.raises(ValueError, match="holds 8 bytes of samples, this one 2"):
        AudioBlock.from_bag({"samples": b"\0\0", "sample_rate": 8000, "channels": 2, "format": "s16",
                             "frames": 2, "first_sample_timestamp_ns": 0})


# -- declaring audio on an input ------------------------------------------------------------------

def test_an_input_declares_the_audio_it_wants_and_the_graph_carries_it():
    @node
    class Listener:
        @node.input(delivery_profile="ordered", audio=SPEECH)
        def audio(self) -> dict: ...

        def process(self, ctx) -> None: ...

    assert describe_node(Listener)["inputs"] == [{"port": "audio", "delivery_profile": "ordered", "audio": SPEECH}]


@pytest.mark.parametrize("profile, shape, words", [
    ("newest", SPEECH, 'delivery_profile="ordered", audio='),
    ("ordered", {**SPEECH, "window_ms": 0.01}, "whole number of samples"),
    ("ordered", {**SPEECH, "format": "s24"}, "format must be one of s16, f32"),
    ("ordered", {"sample_rate": 16000}, "audio= has no 'channels'"),
    ("ordered", {**SPEECH, "rate": 1}, "unknown key 'rate'"),
])
def test_a_wrong_audio_declaration_is_refused_naming_the_input_and_the_fix(profile, shape, words):
    with pytest.raises(NodeDefinitionError, match="input 'audio'") as raised:
        @node
        class Listener:
            @node.input(delivery_profile=profile, audio=shape)
            def audio(self) -> dict: ...

            def process(self, ctx) -> None: ...
    assert words in str(raised.value)


# -- shaping --------------------------------------------------------------------------------------

def feed(shaper: AudioShaper, samples: np.ndarray, rate: int, start_ns: int, sizes: list[int]) -> list[AudioBlock]:
    """Push ``samples`` in blocks of the cycling ``sizes``, stamped from the sample count."""
    out, at, k = [], 0, 0
    while at < len(samples):
        size = sizes[k % len(sizes)]
        out += shaper.push(AudioBlock(samples[at:at + size], rate, start_ns + at * NS // rate))
        at += size
        k += 1
    return out


def test_48k_stereo_becomes_16k_mono_20ms_windows_with_exact_counts_and_timestamps_over_a_minute():
    start = 7_000_000_123
    source = as_s16(tone(48000, 60.1, 1000))  # a minute, and the resampler's tail
    shaper = AudioShaper(AudioShape.parse(SPEECH, "test"))
    blocks = feed(shaper, source, 48000, start, [480, 441, 1024, 7, 2000])  # sizes unlike the window
    minute = blocks[:3000]
    assert len(blocks) >= 3000
    assert all(b.samples.shape == (320, 1) and b.samples.dtype == np.float32 for b in blocks)
    assert all(b.sample_rate == 16000 for b in blocks)
    assert [b.first_sample_timestamp_ns for b in minute] == [start + k * 20_000_000 for k in range(3000)]
    mono = np.concatenate([b.samples[:, 0] for b in minute])
    assert len(mono) == 16000 * 60
    assert peak_hz(mono[16000:32000], 16000) == pytest.approx(1000, abs=1)
    assert np.max(np.abs(mono[16000:])) == pytest.approx(0.5, abs=0.01)  # the mono mix of two equal channels
    assert shaper.resets == 0


def test_shaping_keeps_time_a_tone_at_one_second_comes_out_at_one_second():
    source = np.zeros((48000 * 2, 2), np.float32)
    source[48000] = 1.0  # a click at exactly one second
    blocks = feed(AudioShaper(AudioShape.parse(SPEECH, "test")), source, 48000, 0, [960])
    mono = np.concatenate([b.samples[:, 0] for b in blocks])
    assert int(np.argmax(mono)) == 16000


def test_s16_out_and_mono_to_stereo_upmix():
    shape = AudioShape.parse({"sample_rate": 48000, "channels": 2, "format": "s16", "window_ms": 10}, "test")
    blocks = feed(AudioShaper(shape), tone(48000, 0.1, 440, channels=1), 48000, 0, [333])
    assert len(blocks) == 10 and all(b.samples.shape == (480, 2) and b.format == "s16" for b in blocks)
    both = np.concatenate([b.samples for b in blocks])
    assert np.array_equal(both[:, 0], both[:, 1]) and np.max(both) == pytest.approx(16384, abs=2)


def test_a_short_gap_is_filled_with_silence_a_long_one_or_a_format_change_starts_again_and_says_so():
    said: list[str] = []
    shaper = AudioShaper(AudioShape.parse(SPEECH, "test"), said.append)
    first = feed(shaper, tone(48000, 1.0, 440), 48000, 0, [480])
    assert first[-1].first_sample_timestamp_ns < NS
    jitter = shaper.push(AudioBlock(tone(48000, 0.01, 440), 48000, NS + FILL_AFTER_NS * 3 // 4))
    assert said == [] and all(b.first_sample_timestamp_ns < NS + 20_000_000 for b in jitter)

    # samples lost: 100 ms of silence keeps the windows on time
    resume = NS + 10_000_000 + 100_000_000
    across = feed(shaper, tone(48000, 0.2, 440), 48000, resume, [480])
    assert said == ["a gap of 100.0 ms in the audio: filled with silence"] and shaper.resets == 0
    windows = first + jitter + across
    assert [b.first_sample_timestamp_ns for b in windows] == [k * 20_000_000 for k in range(len(windows))]
    joined = np.concatenate([b.samples[:, 0] for b in windows])
    silent = np.flatnonzero(np.abs(joined[16000:]) < 1e-3)  # after the first second
    assert 1600 - 50 <= len(silent) <= 1600 + 50  # 100 ms at 16 kHz, give or take the resampler's edges
    said.clear()

    later = 5 * NS
    after_gap = feed(shaper, tone(48000, 0.5, 440), 48000, later, [480])
    assert len(said) == 1 and "a gap of 3690.0 ms" in said[0] and f"start again at {later} ns" in said[0]
    assert [b.first_sample_timestamp_ns for b in after_gap[:3]] == [later, later + 20_000_000, later + 40_000_000]

    changed = 6 * NS
    after_change = feed(shaper, as_s16(tone(44100, 0.5, 440, channels=1)), 44100, changed, [441])
    assert "changed from 48000 Hz, 2 channels, f32 to 44100 Hz, 1 channels, s16" in said[1]
    assert after_change[0].first_sample_timestamp_ns == changed
    assert all(b.samples.shape == (320, 1) for b in after_change)

    shaper.push(AudioBlock(as_s16(tone(44100, 0.01, 440, channels=1)), 44100, changed - NS))
    assert "went back" in said[2] and shaper.resets == 3


def test_a_shaped_input_hands_the_node_windows_one_at_a_time_and_skips_bags_that_are_not_audio():
    heard: list[tuple[str, str, str]] = []
    port = ShapedInputPort("audio", "ordered", AudioShape.parse(SPEECH, "test"),
                           on_audio=lambda *what: heard.append(what))
    bags = [AudioBlock(tone(48000, 0.05, 440), 48000, k * 50_000_000).bag() for k in range(4)]
    reader = ListReader(bags[:2] + [{"not": "audio"}] + bags[2:])
    port.add_link("mic/audio->listener/audio", reader)
    inputs = Inputs("listener", {"audio": port})

    assert port.fill() is True
    assert port.fill() is False  # offered and not read yet: nothing new
    windows = []
    while (block := inputs.read("audio", into=AudioBlock)) is not None:
        windows.append(block)
    assert len(windows) >= 9 and all(w.frames == 320 for w in windows)
    assert [w.first_sample_timestamp_ns for w in windows] == [k * 20_000_000 for k in range(len(windows))]
    assert reader.bad == 1 and heard[0][:2] == ("audio", "mic/audio->listener/audio")
    assert "not audio" in heard[0][2]
    port.add_link("b", ListReader(bags[:1]))
    as_dict = inputs.read("audio")
    assert set(as_dict) >= {"samples", "sample_rate", "channels", "format", "frames", "first_sample_timestamp_ns"}


def test_shape_audio_changes_what_an_input_receives_and_refuses_a_plain_input():
    port = ShapedInputPort("audio", "ordered", AudioShape.parse(SPEECH, "test"))
    port.add_link("a", ListReader([AudioBlock(tone(48000, 0.1, 440), 48000, 0).bag()]))
    inputs = Inputs("speaker", {"audio": port, "plain": InputPort("plain", "ordered")})
    inputs.shape_audio("audio", {"sample_rate": 44100, "channels": 2, "format": "f32", "window_ms": 10})
    block = inputs.read("audio", into=AudioBlock)
    assert (block.sample_rate, block.samples.shape) == (44100, (441, 2))
    with pytest.raises(GraphError, match="input 'plain' is not an audio input"):
        inputs.shape_audio("plain", SPEECH)


# -- Opus ------------------------------------------------------------------------------------------

def test_opus_round_trip_gives_back_the_tone_at_its_timestamps():
    av = pytest.importorskip("av")
    assert "libopus" in av.codecs_available
    from tatolab._builtins.opus import OpusDecoder, OpusEncoder
    from tatolab._sdk.builtins import OpusDecoderConfig, OpusEncoderConfig
    from tatolab._sdk.packets import EncodedPacket
    from tatolab.testing import FakeContext

    start = 3 * NS
    source = tone(48000, 2.0, 440) + tone(48000, 2.0, 1234, amplitude=0.2)
    encoder = OpusEncoder(OpusEncoderConfig(bitrate=96000, frame_ms=10, channels=2))
    ctx = FakeContext(OpusEncoder, inputs={"audio": [AudioBlock(source[k:k + 480], 48000, start + k * NS // 48000)
                                                     for k in range(0, len(source), 480)]})
    encoder.setup(ctx)  # asks its audio input for 48 kHz stereo f32 in 10 ms windows (shaped as the host does)
    encoder.process(ctx)
    encoder.teardown(ctx)
    packets = [EncodedPacket.from_bag(bag) for bag in ctx.run.outputs["packets"]]
    assert len(packets) >= 200 and all(p.codec == "opus" and p.sample_rate == 48000 for p in packets)
    assert packets[0].extradata.startswith(b"OpusHead") and packets[0].duration_ns == 10_000_000
    # libopus's first packet starts its pre-skip (312 samples, 6.5 ms) early
    assert packets[1].timestamp_ns - packets[0].timestamp_ns == 10_000_000
    assert packets[0].timestamp_ns == start - 312 * NS // 48000

    decoder_ctx = FakeContext(OpusDecoder, inputs={"packets": ctx.run.outputs["packets"]})
    OpusDecoder(OpusDecoderConfig()).process(decoder_ctx)
    blocks = [AudioBlock.from_bag(bag) for bag in decoder_ctx.run.outputs["audio"]]
    assert blocks[0].first_sample_timestamp_ns == start
    for before, after in zip(blocks, blocks[1:]):
        assert after.first_sample_timestamp_ns == before.first_sample_timestamp_ns + before.frames * NS // 48000
    decoded = np.concatenate([b.samples for b in blocks]).astype(np.float32) / 32768
    middle = slice(24000, 72000)
    lags = range(-200, 201)
    best = max(lags, key=lambda lag: float(np.dot(decoded[middle.start + lag:middle.stop + lag, 0],
                                                    source[middle, 0])))
    assert best == 0  # no delay left once the pre-skip is dropped
    error = decoded[middle] - source[middle]
    snr = 10 * np.log10(np.sum(source[middle] ** 2) / np.sum(error ** 2))
    assert snr > 20, f"SNR {snr:.1f} dB"


# -- devices -----------------------------------------------------------------------------------------

class FakePortAudio:
    default = type("Default", (), {"device": [0, 1]})()

    def query_devices(self, kind=None):
        devices = [
            {"name": "USB Mic", "max_input_channels": 1, "max_output_channels": 0, "default_samplerate": 48000.0},
            {"name": "Speakers", "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 44100.0},
        ]
        if kind == "input":
            return dict(devices[0], index=0)
        if kind == "output":
            return dict(devices[1], index=1)
        return devices


def test_a_device_is_found_by_name_and_a_missing_one_is_refused_naming_the_devices():
    from tatolab._builtins.devices import DeviceMissing, find_device

    sd = FakePortAudio()
    assert find_device(sd, "usb mic", "input", "mic")["index"] == 0
    assert find_device(sd, None, "output", "speaker")["name"] == "Speakers"
    with pytest.raises(DeviceMissing) as raised:
        find_device(sd, "Studio", "input", "mic")
    assert str(raised.value) == (
        "node mic: there is no input device named 'Studio'. Input devices on this machine: 'USB Mic'. "
        "Give one of them in config device=, or leave device out for the default")


def test_with_no_device_at_all_it_says_how_to_get_one_not_to_pick_one():
    from tatolab._builtins.devices import DeviceMissing, find_device

    class Silent(FakePortAudio):
        def query_devices(self, kind=None):
            if kind is not None:
                raise RuntimeError("Error querying device -1")
            return []

    with pytest.raises(DeviceMissing) as raised:
        find_device(Silent(), None, "input", "mic")
    assert str(raised.value).startswith("node mic: there is no input device on this machine (PortAudio lists none); "
                                        "to get one, plug in a microphone")
    assert "device=" not in str(raised.value)


def test_the_speaker_queue_counts_an_underrun_and_plays_silence_instead():
    from tatolab._builtins.speaker import PlayQueue

    queue = PlayQueue(channels=1, start_frames=100, max_frames=1000)
    out = np.ones((80, 1), np.float32)
    queue.put(np.full((50, 1), 0.5, np.float32))
    assert queue.pull(out) is True and not out.any()  # still filling: silence, no underrun
    queue.put(np.full((70, 1), 0.5, np.float32))
    assert queue.pull(out) is True and (out == 0.5).all()
    assert queue.pull(out) is False  # 40 left for 80 wanted
    assert (out[:40] == 0.5).all() and not out[40:].any()
    assert queue.put(np.zeros((1200, 1), np.float32)) == 200  # past max: the oldest goes
    assert queue.frames == 1000


def test_the_microphone_stamps_from_capture_times_then_from_the_count():
    from tatolab._builtins.microphone import RESYNC_NS, SampleClock, first_sample_ns

    # PortAudio's capture time, moved onto the monotonic clock: 2 s old audio handed over at once
    assert first_sample_ns(now_ns=50 * NS, frames=480, rate=48000, current=1000.0, adc=998.0) == 48 * NS
    # no capture time: the callback's time less the block's length
    assert first_sample_ns(now_ns=50 * NS, frames=480, rate=48000, current=0.0, adc=0.0) == 50 * NS - 10_000_000

    clock = SampleClock(48000)
    jittery = [0, 10_000_000 + 3_000_000, 20_000_000 - 4_000_000, 30_000_000]  # device times, a few ms off
    assert [clock.stamp(t, 480) for t in jittery] == [0, 10_000_000, 20_000_000, 30_000_000]
    skipped = 40_000_000 + RESYNC_NS + 5_000_000  # the device lost samples: its time runs ahead
    assert clock.stamp(skipped, 480) == skipped and clock.resyncs == 1
    assert clock.stamp(skipped + 11_000_000, 480) == skipped + 10_000_000 and clock.resyncs == 1
