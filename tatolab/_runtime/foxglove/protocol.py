"""The Foxglove WebSocket protocol's messages this server speaks (``foxglove.sdk.v1``, and its
older name ``foxglove.websocket.v1``): JSON text messages for the control plane, binary ones
(an opcode byte, little-endian fields) for data, time and playback state.

The layouts follow the foxglove-sdk's own (rust/foxglove/src/protocol): serverInfo, advertise,
unadvertise, status; messageData (opcode 1: subscription u32, log time u64, payload), time (2),
playbackState (5: status u8, current time u64, speed f32, did-seek u8, request id); from the
client subscribe, unsubscribe and playbackControlRequest (binary opcode 3: command u8, speed f32,
had-seek u8, seek time u64, request id).
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from typing import Any

SUBPROTOCOLS = ("foxglove.sdk.v1", "foxglove.websocket.v1")
MESSAGE_DATA, TIME, PLAYBACK_STATE = 1, 2, 5
PLAYBACK_CONTROL = 3  # the client's binary opcode
PLAYING, PAUSED, BUFFERING, ENDED = 0, 1, 2, 3
PLAY, PAUSE = 0, 1
_DATA_HEAD = struct.Struct("<BIQ")


@dataclass(frozen=True)
class Channel:
    """One advertised channel: an output (or a recording's topic)."""

    id: int
    topic: str
    encoding: str  # json | protobuf
    schema_name: str
    schema_encoding: str  # jsonschema | protobuf
    schema: bytes  # the JSON Schema's text, or a protobuf FileDescriptorSet

    def advertised(self) -> dict[str, Any]:
        schema = base64.b64encode(self.schema).decode() if self.schema_encoding == "protobuf" else self.schema.decode()
        return {"id": self.id, "topic": self.topic, "encoding": self.encoding, "schemaName": self.schema_name,
                "schemaEncoding": self.schema_encoding, "schema": schema}


def server_info(name: str, session: str, playback: tuple[int, int] | None = None) -> str:
    info: dict[str, Any] = {"op": "serverInfo", "name": name, "capabilities": [], "supportedEncodings": [],
                            "metadata": {}, "sessionId": session}
    if playback is not None:
        info["capabilities"] += ["time", "playbackControl"]
        info["dataStartTime"], info["dataEndTime"] = _stamp(playback[0]), _stamp(playback[1])
    return json.dumps(info)


def _stamp(ns: int) -> dict[str, int]:
    sec, nsec = divmod(max(0, ns), 1_000_000_000)
    return {"sec": min(sec, 0xFFFFFFFF), "nsec": nsec}


def advertise(channels: list[Channel]) -> str:
    return json.dumps({"op": "advertise", "channels": [c.advertised() for c in channels]})


def unadvertise(ids: list[int]) -> str:
    return json.dumps({"op": "unadvertise", "channelIds": ids})


def status(level: int, text: str) -> str:
    """level: 0 info, 1 warning, 2 error (the app shows it)."""
    return json.dumps({"op": "status", "level": level, "message": text})


def message_data(subscription: int, log_time_ns: int, payload: bytes | memoryview) -> bytes:
    return b"".join((_DATA_HEAD.pack(MESSAGE_DATA, subscription, max(0, log_time_ns)), payload))


def time(ns: int) -> bytes:
    return struct.pack("<BQ", TIME, max(0, ns))


def playback_state(state: int, current_ns: int, speed: float, did_seek: bool, request_id: str | None) -> bytes:
    rid = (request_id or "").encode()
    return struct.pack("<BBQfBI", PLAYBACK_STATE, state, max(0, current_ns), speed, int(did_seek), len(rid)) + rid


@dataclass(frozen=True)
class PlaybackControl:
    command: int  # PLAY | PAUSE
    speed: float
    seek_ns: int | None
    request_id: str


def parse_playback_control(data: bytes) -> PlaybackControl:
    """A client's binary message with opcode PLAYBACK_CONTROL (ValueError when it is not one)."""
    if len(data) < 19 or data[0] != PLAYBACK_CONTROL:
        raise ValueError("not a playbackControlRequest")
    command, speed, had_seek, seek, length = struct.unpack_from("<BfBQI", data, 1)
    return PlaybackControl(command, speed, seek if had_seek else None, data[19:19 + length].decode(errors="replace"))


def parse_data(data: bytes) -> tuple[int, int, bytes]:
    """A server's messageData as (subscription, log time, payload): for clients and tests."""
    opcode, subscription, log_time = _DATA_HEAD.unpack_from(data)
    if opcode != MESSAGE_DATA:
        raise ValueError(f"opcode {opcode} is not messageData")
    return subscription, log_time, data[_DATA_HEAD.size:]
