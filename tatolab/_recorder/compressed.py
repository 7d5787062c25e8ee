"""Encoded video as ``foxglove.CompressedVideo``: an encoder's packets (or the recorder's own H.264
encode of frames) as messages Foxglove plays, and back.

Foxglove decodes a channel's messages in order, each one access unit in Annex B, and needs the
parameter sets (SPS/PPS, and VPS for H.265) in band in every keyframe: a packet whose keyframe
lacks them (an encoder with a global header, as the H264Encoder built-in is) gets its extradata
put in front (in Annex B: an ``avcC``/``hvcC`` record is rewritten so), and length-prefixed NAL
units become start-code ones. Nothing is decoded or encoded again. The packet's keyframe flag and
its other keys (``width``, ``encoder``...) ride in protobuf field 1000 (formats.py), so McapSource
finds the keyframes without parsing the bitstream.
"""

from __future__ import annotations

from typing import Any

from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from google.protobuf.message import DecodeError
from mcap_protobuf.schema import build_file_descriptor_set

from tatolab._recorder import formats

SCHEMA = CompressedVideo.DESCRIPTOR.full_name
FORMATS = {"h264": "h264", "hevc": "h265"}  # a packet bag's codec -> CompressedVideo's format
CODECS = {v: k for k, v in FORMATS.items()}
START = b"\x00\x00\x00\x01"
_PACKET_KEYS = ("codec", "data", "timestamp_ns", "extradata")


def schema() -> tuple[str, bytes]:
    return SCHEMA, build_file_descriptor_set(CompressedVideo).SerializeToString()


def is_packet(bag: Any) -> bool:
    """An encoded video packet's bag (tatolab/_sdk/packets.py) Foxglove can play."""
    return isinstance(bag, dict) and bag.get("codec") in FORMATS and isinstance(bag.get("data"), (bytes, bytearray))


def _nal_units_of_length_prefixed(data: bytes, size: int = 4) -> list[bytes]:
    units, at = [], 0
    while at + size <= len(data):
        length = int.from_bytes(data[at:at + size], "big")
        at += size
        units.append(data[at:at + length])
        at += length
    return units


def annex_b(data: bytes) -> bytes:
    """``data`` in Annex B (start codes), whether it was already or length-prefixed (4 bytes)."""
    if data.startswith(START) or data.startswith(b"\x00\x00\x01"):
        return data
    return b"".join(START + unit for unit in _nal_units_of_length_prefixed(data))


def parameter_sets(codec: str, extradata: bytes) -> bytes:
    """The codec's extradata as Annex B parameter sets (it may be Annex B already, or avcC/hvcC)."""
    if not extradata or extradata.startswith(START) or extradata.startswith(b"\x00\x00\x01"):
        return extradata
    units: list[bytes] = []
    try:
        if codec == "h264" and extradata[0] == 1:  # avcC: SPS count & 0x1f, each u16 length; PPS count, each
            at = 5
            for mask in (0x1F, 0xFF):
                count = extradata[at] & mask
                at += 1
                for _ in range(count):
                    length = int.from_bytes(extradata[at:at + 2], "big")
                    units.append(extradata[at + 2:at + 2 + length])
                    at += 2 + length
        elif codec == "hevc" and extradata[0] == 1:  # hvcC: arrays of NAL units after 22 bytes
            at, arrays = 23, extradata[22]
            for _ in range(arrays):
                count = int.from_bytes(extradata[at + 1:at + 3], "big")
                at += 3
                for _ in range(count):
                    length = int.from_bytes(extradata[at:at + 2], "big")
                    units.append(extradata[at + 2:at + 2 + length])
                    at += 2 + length
    except IndexError:
        return b""
    return b"".join(START + unit for unit in units)


def _has_parameter_sets(codec: str, data: bytes) -> bool:
    kinds = (7,) if codec == "h264" else (32, 33)
    at = 0
    while (at := data.find(b"\x00\x00\x01", at)) >= 0 and at + 3 < len(data):
        header = data[at + 3]
        kind = header & 0x1F if codec == "h264" else (header >> 1) & 0x3F
        if kind in kinds:
            return True
        at += 3
    return False


def encode(bag: dict[str, Any], frame_id: str) -> bytes:
    """A packet's bag (codec, data, timestamp_ns, keyframe, extradata...) as a CompressedVideo message."""
    codec = str(bag["codec"])
    data = annex_b(bytes(bag["data"]))
    keyframe = bool(bag.get("keyframe"))
    if keyframe and not _has_parameter_sets(codec, data):
        data = parameter_sets(codec, bytes(bag.get("extradata") or b"")) + data
    message = CompressedVideo(frame_id=frame_id, data=data, format=FORMATS[codec])
    message.timestamp.seconds, message.timestamp.nanos = divmod(int(bag.get("timestamp_ns") or 0), 1_000_000_000)
    extra = {k: v for k, v in bag.items() if k not in _PACKET_KEYS}
    extra["keyframe"] = keyframe
    return message.SerializeToString() + formats.extra_field(extra)


def decode(data: bytes) -> dict[str, Any]:
    """A CompressedVideo message as a packet's bag (Annex B data; keyframe as recorded, else found)."""
    try:
        message = CompressedVideo.FromString(data)
    except DecodeError as exc:
        raise formats.NotRecorded(f"not a foxglove.CompressedVideo message: {exc}") from None
    codec = CODECS.get(message.format)
    if codec is None:
        raise formats.NotRecorded(f"video format {message.format!r}; McapSource replays h264 and h265")
    extra = formats.extra_of(message)
    bag = {**extra, "codec": codec, "data": message.data,
           "timestamp_ns": message.timestamp.seconds * 1_000_000_000 + message.timestamp.nanos}
    if "keyframe" not in bag:
        bag["keyframe"] = _has_parameter_sets(codec, message.data)
    return bag


class Decoder:
    """A CompressedVideo channel's packets back to RGBA pictures (McapSource), in order from a keyframe."""

    def __init__(self, codec: str) -> None:
        import av

        self.codec: Any = av.CodecContext.create(codec, "r")

    def decode(self, bag: dict[str, Any]) -> list[Any]:
        """The pictures this packet completes, as RGBA arrays (height x width x 4)."""
        import av

        try:
            pictures = self.codec.decode(av.Packet(bytes(bag["data"])))
        except av.error.InvalidDataError:  # a packet before any keyframe, or damaged: skipped
            return []
        return [p.to_ndarray(format="rgba") for p in pictures]


def keyframe_of(data: bytes) -> bool:
    """Whether a CompressedVideo message is a keyframe (its recorded flag, else its parameter sets)."""
    return bool(decode(data)["keyframe"])
