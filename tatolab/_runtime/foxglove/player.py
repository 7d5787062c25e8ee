"""A recording played to the Foxglove app under its playback controls (``playbackControl``):
play, pause, rate and seek, as the app's own player bar sends them.

Each channel of the file is advertised as the file describes it (its schema as written); its
messages are sent at their log times, scaled by the rate, with the time message before each so
the app's clock follows. A seek restarts reading at that time (the file's index finds it); the
state is told to every client after each request and when the end is reached.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from mcap.reader import make_reader

from tatolab._runtime.foxglove import protocol
from tatolab._runtime.foxglove.protocol import Channel, PlaybackControl
from tatolab._runtime.foxglove.server import Hub

SLEEP_MAX_S = 0.1  # at most this long between looks at the controls


def summary(path: Path) -> tuple[list[Channel], tuple[int, int]]:
    """The file's channels as Foxglove channels, and its first and last log times."""
    with open(path, "rb") as file:
        reader = make_reader(file)
        found = reader.get_summary()
        if found is not None and found.statistics is not None:
            schemas, chans = found.schemas, found.channels
            span = (found.statistics.message_start_time, found.statistics.message_end_time)
        else:  # not indexed (cut short): read through it once
            schemas, chans, first, last = {}, {}, None, 0
            for schema, channel, message in reader.iter_messages():
                if schema is not None:
                    schemas[schema.id] = schema
                chans[channel.id] = channel
                first = message.log_time if first is None else min(first, message.log_time)
                last = max(last, message.log_time)
            span = (first or 0, last)
    out = []
    for channel in chans.values():
        schema = schemas.get(channel.schema_id)
        out.append(Channel(channel.id, channel.topic, channel.message_encoding, schema.name if schema else "",
                           schema.encoding if schema else "", schema.data if schema else b""))
    return out, span


class Player:
    """Plays ``path`` to ``hub``'s clients; starts paused at the beginning."""

    def __init__(self, path: Path, hub: Hub, span: tuple[int, int]) -> None:
        self.path, self.hub, self.span = path, hub, span
        self.playing = False
        self.speed = 1.0
        self.position = span[0]  # the log time reached
        self._seek: int | None = span[0]
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.ended = False

    def control(self, request: PlaybackControl) -> None:
        """A client's request (the server's loop): applied now, and the new state told to all."""
        with self._lock:
            self.playing = request.command == protocol.PLAY
            if request.speed > 0:
                self.speed = float(request.speed)
            if request.seek_ns is not None:
                self._seek = min(max(request.seek_ns, self.span[0]), self.span[1])
                self.position = self._seek
                self.ended = False
        self._tell(request.seek_ns is not None, request.request_id)
        self._changed.set()

    def _tell(self, did_seek: bool, request_id: str | None) -> None:
        state = protocol.ENDED if self.ended else protocol.PLAYING if self.playing else protocol.PAUSED
        self.hub.send_all(protocol.playback_state(state, self.position, self.speed, did_seek, request_id))

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()

    def run(self) -> None:
        with open(self.path, "rb") as file:
            while not self._stop.is_set():
                with self._lock:
                    start, self._seek = self._seek, None
                if start is None or not self.playing:
                    self._changed.wait()
                    self._changed.clear()
                    if start is not None:
                        with self._lock:
                            self._seek = start if self._seek is None else self._seek
                    continue
                self._play_from(file, start)

    def _play_from(self, file: BinaryIO, start: int) -> None:
        """Send messages from ``start`` until the end, a seek, or a stop; pauses keep the place."""
        file.seek(0)
        messages: Any = make_reader(file).iter_messages(start_time=start, log_time_order=True)
        wall, at = time.monotonic(), start  # log time ``at`` is shown at monotonic ``wall``
        for _, channel, message in messages:
            while True:
                if self._stop.is_set():
                    return
                with self._lock:
                    if self._seek is not None:
                        return  # run() starts again there
                    playing, speed = self.playing, self.speed
                if not playing:
                    self._changed.wait()
                    self._changed.clear()
                    wall, at = time.monotonic(), self.position
                    continue
                due = wall + (message.log_time - at) / 1e9 / speed
                left = due - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, SLEEP_MAX_S))
                self._changed.clear()
                if self.speed != speed:  # the rate changed: the clock goes on from here at the new one
                    wall, at = time.monotonic(), self.position
            self.position = max(self.position, message.log_time)
            self.hub.send_all(protocol.time(message.log_time))
            self.hub.publish(channel.id, message.log_time, message.data)
        with self._lock:
            self.playing, self.ended = False, True
            self.position = self.span[1]
            self._seek = None
        self._tell(False, None)
