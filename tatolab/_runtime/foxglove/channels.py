"""How an output becomes a Foxglove channel, and each of its bags a message on it.

The kind is the recorder's (../../_recorder/formats.py), from the first bags the output writes:

- ``json``: the bag as JSON, with a JSON Schema inferred from the first bags;
- ``audio``: ``foxglove.RawAudio`` (protobuf);
- ``image``: frames no larger than 640x360, ``foxglove.RawImage`` with the RGBA pixels;
- ``video``: larger frames, ``foxglove.CompressedVideo`` in H.264 (Annex B, parameter sets in
  band before each keyframe, no B-frames, as the app decodes), encoded here only while someone
  subscribes, by the MoQ relay's encoder (../relay/video.py);
- ``packets``: an encoder's packets (H.264, H.265), ``foxglove.CompressedVideo`` as they are.
"""

from __future__ import annotations

import json
from typing import Any

from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap_protobuf.schema import build_file_descriptor_set

from tatolab._recorder import compressed, formats
from tatolab._runtime.foxglove.protocol import Channel
from tatolab._surfaces import pool as surfaces
from tatolab._surfaces.frame import VideoFrame

RAW_MAX = (640, 360)  # frames up to this size go as RawImage; larger ones as H.264


def kind_of(bag: Any) -> str:
    if compressed.is_packet(bag):
        return "packets"
    kind = formats.kind_of(bag)
    if kind == "video" and (int(bag["width"]) > RAW_MAX[0] or int(bag["height"]) > RAW_MAX[1]):
        return "video"
    return "image" if kind == "video" else kind


def describe(channel_id: int, topic: str, kind: str, first_bags: list[Any]) -> Channel:
    """The channel an output of ``kind`` is advertised as."""
    if kind == "json":
        schema = formats.infer_schema(first_bags, topic)
        return Channel(channel_id, topic, "json", topic, "jsonschema", json.dumps(schema).encode())
    if kind in ("video", "packets"):
        message: Any = CompressedVideo
        name, data = message.DESCRIPTOR.full_name, build_file_descriptor_set(message).SerializeToString()
    else:
        name, data = formats.protobuf_schema("video" if kind == "image" else "audio")
    return Channel(channel_id, topic, "protobuf", name, "protobuf", data)


def plain_message(kind: str, bag: Any, topic: str) -> bytes | None:
    """A JSON, audio, packet or small frame's bag as its message (None: its frame is gone already)."""
    if kind == "json":
        return formats.encode_json(bag)
    if kind == "audio":
        return formats.encode_audio(bag)
    if kind == "packets":
        return compressed.encode(bag, topic) if compressed.is_packet(bag) else None
    try:
        frame = VideoFrame.open(bag)
    except surfaces.SurfaceError:  # reused before we got to it: skipped
        return None
    try:
        return formats.encode_video(bag, frame._memory(), topic)
    finally:
        frame.release()


def video_message(data: bytes, stamp_ns: int, topic: str) -> bytes:
    """One H.264 access unit as a CompressedVideo message."""
    message = CompressedVideo(frame_id=topic, data=data, format="h264")
    message.timestamp.seconds, message.timestamp.nanos = divmod(int(stamp_ns), 1_000_000_000)
    return message.SerializeToString()
