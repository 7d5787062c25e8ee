"""A private PulseAudio for the audio tests: its own folder, a null sink and a sine source.

PortAudio reaches it through ALSA's pulse plugin (libasound2-plugins), which follows
``PULSE_SERVER``: a process given ``env`` sees the ALSA devices ``pulse`` and ``default``, whose
output is the null sink ``speaker`` and whose input is the sine: a tone played (module-sine) into
a second null sink, ``room``, heard through its monitor. (module-sine-source would do too, but it
hands over two seconds at a time; a monitor delivers every few milliseconds, as a microphone
does.) ``record`` reads what ``speaker`` played from its monitor with parec. ``stop`` ends the server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import numpy as np

from harness import wait_for

SINK = "speaker"
ROOM = "room"


class Pulse:
    def __init__(self, folder: Path, sink_rate: int, tone_hz: int, source_rate: int) -> None:
        self.folder = folder
        self.sink_rate = sink_rate
        self.tone_hz = tone_hz
        self.socket = folder / "run" / "native"
        self.env = {"PULSE_SERVER": f"unix:{self.socket}"}
        self._source_rate = source_rate
        self.process: subprocess.Popen | None = None

    def start(self) -> "Pulse":
        for name in ("run", "state", "home"):
            (self.folder / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        script = self.folder / "default.pa"
        script.write_text(
            "load-module module-native-protocol-unix auth-anonymous=1\n"
            f"load-module module-null-sink sink_name={SINK} rate={self.sink_rate} channels=2\n"
            f"load-module module-null-sink sink_name={ROOM} rate={self._source_rate} channels=1\n"
            f"load-module module-sine sink={ROOM} frequency={self.tone_hz}\n"
            f"set-default-sink {SINK}\nset-default-source {ROOM}.monitor\n"
        )
        env = dict(os.environ, HOME=str(self.folder / "home"), PULSE_RUNTIME_PATH=str(self.folder / "run"),
                   PULSE_STATE_PATH=str(self.folder / "state"), XDG_RUNTIME_DIR=str(self.folder / "run"))
        self.log = open(self.folder / "pulse.log", "wb")
        self.process = subprocess.Popen(
            ["pulseaudio", "--daemonize=no", "-n", f"--file={script}", "--exit-idle-time=-1", "--disable-shm=yes",
             "--use-pid-file=no", "--log-target=stderr"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for(lambda: self.process.poll() is not None or self._answers(), timeout=20, what="PulseAudio to answer")
        if self.process.poll() is not None:
            raise RuntimeError(f"PulseAudio did not start: {(self.folder / 'pulse.log').read_text()}")
        return self

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        done = subprocess.run(["pactl", "info"], env=dict(os.environ, **self.env), capture_output=True, timeout=10)
        return done.returncode == 0

    @contextlib.contextmanager
    def record(self, path: Path) -> Iterator[Path]:
        """What the null sink plays, as mono float32 at the sink's rate, into ``path`` while the block runs."""
        with open(path, "wb") as out:
            parec = subprocess.Popen(
                ["parec", f"--device={SINK}.monitor", f"--rate={self.sink_rate}", "--channels=1",
                 "--format=float32le", "--raw", "--latency-msec=20"],
                env=dict(os.environ, **self.env), stdout=out, stderr=subprocess.DEVNULL,
            )
            try:
                yield path
            finally:
                parec.terminate()
                parec.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        self.log.close()


def available() -> str | None:
    """Why the PulseAudio tests cannot run here, or None."""
    missing = [tool for tool in ("pulseaudio", "pactl", "parec") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (.ci/run installs pulseaudio and pulseaudio-utils)"
    return None


def recorded(path: Path) -> np.ndarray:
    """What ``record`` has written so far."""
    raw = path.read_bytes()
    data = np.frombuffer(raw[:len(raw) - len(raw) % 4], dtype=np.float32)  # parec may be mid-sample
    return data


# A node (nodes/tone.py in a test project) writing two seconds of 440 Hz + 1234 Hz at 48 kHz stereo,
# then nothing; it saves what it sent (sent.npy) and its first sample's time (start) in the project.
TONE = '''
import numpy as np
from tatolab.stream import AudioBlock, node

NS = 1_000_000_000


@node(execution="manual")
class Tone:
    """Two seconds of 440 Hz + 1234 Hz at 48 kHz stereo, then nothing."""

    @node.output()
    def audio(self) -> dict: ...

    def setup(self, ctx) -> None:
        t = np.arange(96000) / 48000
        mono = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1234 * t)).astype(np.float32)
        np.save("sent.npy", mono)
        start = ctx.time
        open("start", "w").write(str(start))
        samples = np.stack([mono, mono], axis=1)
        for at in range(0, 96000, 960):  # 100 bags: all still in the ring (128) when the encoder starts late
            ctx.outputs.write("audio", AudioBlock(samples[at:at + 960], 48000, start + at * NS // 48000))
'''
