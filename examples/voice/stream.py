import os

from tatolab.stream import MicrophoneSource, Mp4Sink, OpusEncoder, StreamBuilder, stream

from nodes.jsonl_sink import JsonlSink
from nodes.vad import VoiceActivity
from nodes.wav_source import WavSource

# What it listens to: VOICE_SOURCE=mic for the microphone (the system's default input), else a
# WAV file (default speech.wav beside this file, made with espeak-ng: see README, "Run a model")
SOURCE = os.environ.get("VOICE_SOURCE") or "speech.wav"


@stream
def voice(stream_builder: StreamBuilder) -> None:
    """Finds speech: each segment's times on vad/segments and in segments.jsonl, its audio in an
    MP4 (Opus) of its own under speech/."""
    if SOURCE == "mic":
        source = stream_builder.add(MicrophoneSource, name="mic")
    else:
        source = stream_builder.add(WavSource, config={"path": SOURCE, "loop": not os.environ.get("VOICE_SOURCE")},
                                    name="wav")
    vad = stream_builder.add(VoiceActivity, name="vad")
    opus = stream_builder.add(OpusEncoder, config={"channels": 1}, name="opus")
    # the encoder's input fills pauses under 1 s with silence: segments further apart get files of their own
    recorder = stream_builder.add(Mp4Sink, config={"path": "speech/segment.mp4", "rotate_gap_ms": 500},
                                  name="recorder")
    sink = stream_builder.add(JsonlSink, config={"path": "segments.jsonl"}, name="jsonl")
    stream_builder.connect(source.output("audio"), vad.input("audio"))
    stream_builder.connect(vad.output("speech"), opus.input("audio"))
    stream_builder.connect(opus.output("packets"), recorder.input("tracks"))
    stream_builder.connect(vad.output("segments"), sink.input("rows"))
    stream_builder.expose(vad.output("segments"))
