"""A built-in without what it needs (a microphone on a machine with no input device) is one clear
`waiting` state in `graph`, with one log line saying what is missing and how to get one; it looks
again every few seconds and never restarts or logs a traceback."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness import graph_node, make_project, read_jsonl, wait_for
from pulse import TONE
from tatolab._builtins.waiting import RECHECK_S

# PortAudio reaches PulseAudio through ALSA's pulse plugin: a server that is not there gives no device
NO_SOUND = {"PULSE_SERVER": "unix:/nonexistent/tatolab-test-no-pulse"}
INPUTS = "import sounddevice as sd; print(sum(d['max_input_channels'] > 0 for d in sd.query_devices()))"


def _input_devices(env: dict) -> int | None:
    """How many input devices PortAudio lists with ``env``; None without PortAudio."""
    done = subprocess.run([sys.executable, "-c", INPUTS], env=env, capture_output=True, text=True, timeout=60)
    return int(done.stdout) if done.returncode == 0 else None


@pytest.mark.slow
def test_a_microphone_with_no_input_device_waits_for_one_in_one_clear_state(runtime, project_venv, tmp_path):
    env = {**runtime.env, **NO_SOUND}
    devices = _input_devices(env)
    if devices:
        pytest.skip(f"this machine has {devices} input device(s): PortAudio finds them without PulseAudio")
    project = make_project(tmp_path / "listen", project_venv, {"stream.py": '''
        from tatolab.stream import MicrophoneSource, StreamBuilder, stream


        @stream
        def listen(stream_builder: StreamBuilder) -> None:
            stream_builder.add(MicrophoneSource, name="mic")
    '''})
    runtime.popen_cli("run", cwd=project, env=env)
    wait_for(lambda: runtime.cli("graph", "--stream", "listen").returncode == 0, timeout=60, what="stream listen")
    mic = wait_for(lambda: (lambda n: n if n.get("state") == "waiting" else None)(graph_node(runtime, "listen", "mic")),
                   timeout=60, what="the microphone waiting")
    if devices is None:  # no PortAudio library at all: the same wait, naming what to install
        assert "PortAudio, which is not installed" in mic["reason"] and "apt install libportaudio2" in mic["reason"]
    else:
        assert mic["reason"] == (
            "node mic: there is no input device on this machine (PortAudio lists none); to get one, plug in a "
            "microphone (a USB one), or run PulseAudio with a source (`pactl load-module module-null-source` "
            "gives a silent one; PortAudio reaches PulseAudio with libasound2-plugins)")
    assert mic["metrics"]["waiting"] == mic["reason"]
    # it looks again every few seconds: two more looks later, the same process, one line, no traceback
    until = time.monotonic() + 2 * RECHECK_S + 1
    while time.monotonic() < until:
        node = graph_node(runtime, "listen", "mic")
        assert (node["state"], node["pid"], node["restarts"], node["last_error"]) == ("waiting", mic["pid"], 0, None)
        time.sleep(0.5)  # polling pace: what is checked is that nothing changes over two re-checks
    records = [r for r in read_jsonl(project / ".streamlib" / "logs" / "listen.jsonl") if r.get("node") == "mic"]
    said = [r["message"] for r in records if r["level"] in ("warning", "error", "critical")]
    assert said == [f"{mic['reason']}; waiting, checked every {RECHECK_S:g} s"], said
    assert not any("Traceback" in str(r) for r in records)


OUTPUTS = "import sounddevice as sd; print(sum(d['max_output_channels'] > 0 for d in sd.query_devices()))"


@pytest.mark.slow
def test_a_speaker_with_no_output_device_waits_for_one_and_counts_what_it_could_not_play(runtime, video_venv,
                                                                                         tmp_path):
    env = {**runtime.env, **NO_SOUND}
    done = subprocess.run([sys.executable, "-c", OUTPUTS], env=env, capture_output=True, text=True, timeout=60)
    if done.returncode == 0 and int(done.stdout):
        pytest.skip(f"this machine has {done.stdout.strip()} output device(s): PortAudio finds them without PulseAudio")
    project = make_project(tmp_path / "play", video_venv, {
        "stream.py": '''
            from tatolab.stream import SpeakerSink, StreamBuilder, stream
            from nodes.tone import Tone


            @stream
            def play(stream_builder: StreamBuilder) -> None:
                tone = stream_builder.add(Tone, name="tone")
                speaker = stream_builder.add(SpeakerSink, name="speaker")
                stream_builder.connect(tone.output("audio"), speaker.input("audio"))
        ''',
        "nodes/__init__.py": "",
        "nodes/tone.py": TONE,
    })
    runtime.popen_cli("run", cwd=project, env=env)
    wait_for(lambda: runtime.cli("graph", "--stream", "play").returncode == 0, timeout=60, what="stream play")
    # the two seconds of tone are read and not played, and counted; the node waits, in one clear state
    speaker = wait_for(lambda: (lambda n: n if n.get("state") == "waiting"
                                and n.get("metrics", {}).get("unplayed_ms") == 2000 else None)(
        graph_node(runtime, "play", "speaker")), timeout=60, what="the speaker waiting, the tone counted unplayed")
    if done.returncode != 0:  # no PortAudio library at all: the same wait, naming what to install
        assert "PortAudio, which is not installed" in speaker["reason"]
    else:
        assert speaker["reason"].startswith("node speaker: there is no output device on this machine"), speaker
    assert speaker["metrics"]["waiting"] == speaker["reason"]
    # it looks again every few seconds: two more looks later, the same process, one line, no traceback
    until = time.monotonic() + 2 * RECHECK_S + 1
    while time.monotonic() < until:
        node = graph_node(runtime, "play", "speaker")
        assert (node["state"], node["pid"], node["restarts"], node["last_error"]) == (
            "waiting", speaker["pid"], 0, None)
        time.sleep(0.5)  # polling pace: what is checked is that nothing changes over two re-checks
    records = [r for r in read_jsonl(project / ".streamlib" / "logs" / "play.jsonl") if r.get("node") == "speaker"]
    said = [r["message"] for r in records if r["level"] in ("warning", "error", "critical")]
    assert said == [f"{speaker['reason']}; waiting, checked every {RECHECK_S:g} s"], said
    assert not any("Traceback" in str(r) for r in records)
