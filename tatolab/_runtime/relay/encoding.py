"""The runtime's side of a video output's encoder process (encoder_main.py), supervised as a
built-in node is: started when the first reader subscribes to the output's video track, its
stderr in the runtime's log, restarted with the nodes' backoff when it dies (its readers see a
gap and go on at its next keyframe), ended when the last reader leaves.

Used by the output's pump thread (feed.py) alone; ``graph`` reads ``pid``, ``restarts``,
``last_error`` and the counts unlocked (a value one frame behind is fine).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import msgspec

from tatolab._runtime.relay.encoder_main import LENGTH
from tatolab._runtime.rules.health import restart_delay_s

ANSWER_TIMEOUT_S = 10.0  # an encode that takes longer is a hung encoder: it is killed and restarted
STOP_TIMEOUT_S = 2.0


class EncoderProcess:
    """One output's encoder process: ``encode(bag payload)`` -> [(access unit, timestamp µs, keyframe)]."""

    def __init__(self, pool_base: str, path: str, say: Callable[..., None]) -> None:
        self.pool_base = pool_base
        self.path = path  # the output's broadcast path, for the log
        self.say = say
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.restarts = 0
        self.last_error: str | None = None
        self.name = ""
        self.frames = 0  # encoded, over every process it started
        self.skipped = 0
        self._counted = (0, 0)  # frames and skipped of the processes before this one
        self._down_until = 0.0  # restarting: frames until then are not encoded (a gap)
        self._streak = 0  # deaths in a row without a frame encoded between them

    def encode(self, payload: bytes) -> list[tuple[bytes, int, bool]]:
        if self.process is None:
            if time.monotonic() < self._down_until:
                return []  # backing off: readers see a gap and go on at the next keyframe
            self._start()
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(len(payload).to_bytes(LENGTH, "little") + payload)
            self.process.stdin.flush()
            head = self._read(LENGTH)
            answer = msgspec.msgpack.decode(self._read(int.from_bytes(head, "little")))
        except (OSError, EOFError, TimeoutError, msgspec.DecodeError) as exc:
            self._died(exc)
            return []
        if "error" in answer:
            raise RuntimeError(answer["error"])  # no encoder opens here: the pump says so and stops
        self._streak = 0
        before_frames, before_skipped = self._counted
        self.frames, self.skipped, self.name = before_frames + answer["frames"], before_skipped + answer["skipped"], \
            answer["name"]
        return [(bytes(data), int(stamp), bool(key)) for data, stamp, key in answer["packets"]]

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tatolab._runtime.relay.encoder_main", self.pool_base, str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("TATOLAB_")}, cwd="/")
        self.pid = self.process.pid
        threading.Thread(target=self._log, args=(self.process,), name=f"tatolab-moq-encoder-log {self.path}",
                         daemon=True).start()

    def _log(self, process: subprocess.Popen[bytes]) -> None:
        """Its stderr, line by line, in the runtime's log."""
        assert process.stderr is not None
        for line in process.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                self.say("info", f"MoQ encoder for {self.path}: {text}", encoder_pid=process.pid)

    def _read(self, size: int) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        fd, data, deadline = self.process.stdout.fileno(), b"", time.monotonic() + ANSWER_TIMEOUT_S
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"it did not answer within {ANSWER_TIMEOUT_S:g} s")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                raise EOFError("it ended")
            data += chunk
        return data

    def _died(self, exc: BaseException) -> None:
        """It ended (or hung, and is killed now): say how, and restart it after the nodes' backoff."""
        process, self.process = self.process, None
        assert process is not None
        if process.poll() is None:
            process.kill()
        code = process.wait()
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        if isinstance(exc, TimeoutError):
            how = f"hung ({exc}) and was killed"
        self._close_pipes(process)
        self.restarts += 1
        self._streak += 1
        self._counted = (self.frames, self.skipped)
        delay = restart_delay_s(self._streak)
        self._down_until = time.monotonic() + delay
        self.last_error = f"the encoder process (pid {self.pid}) {how}"
        self.pid = None
        self.say("warning", f"MoQ encoder for {self.path}: {self.last_error}; readers see a gap, and a new one "
                 f"starts {'now' if delay == 0 else f'in {delay:g} s'} (restart {self.restarts})",
                 restarts=self.restarts)

    @staticmethod
    def _close_pipes(process: subprocess.Popen[bytes]) -> None:
        for pipe in (process.stdin, process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass

    def dispose(self) -> None:
        """Nobody watches any more: closing its stdin ends it; one that does not end is killed."""
        process, self.process = self.process, None
        self.pid = None
        if process is None:
            return
        self._close_pipes(process)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def state(self) -> dict[str, Any]:
        return {"pid": self.pid, "restarts": self.restarts, "last_error": self.last_error}


def parameter_sets(width: int, height: int) -> bytes:
    """The SPS/PPS the encoder sends for frames of this size, from a short-lived encoder process (an
    encoder that crashes as it opens ends that process, not the runtime). Blocks: call it off a loop."""
    done = subprocess.run(
        [sys.executable, "-m", "tatolab._runtime.relay.encoder_main", "--parameter-sets", str(width), str(height)],
        capture_output=True, timeout=60, start_new_session=True, cwd="/",
        env={k: v for k, v in os.environ.items() if not k.startswith("TATOLAB_")})
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(why[-1] if why else f"the encoder process exited with status {done.returncode}")
    return done.stdout
