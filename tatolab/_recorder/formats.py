"""How a bag becomes an MCAP message, and back.

Three kinds of channel, chosen by the first bag an output writes:

- ``video`` (a bag naming a surface): ``foxglove.RawImage`` in protobuf, the frame's pixels in
  ``data``, its ``timestamp_ns`` in ``timestamp``; Foxglove shows it as an image.
- ``audio`` (a bag with samples, rate, channels, format): ``foxglove.RawAudio`` in protobuf,
  format ``pcm-s16`` or ``pcm-f32`` (Foxglove plays the first), the first sample's time in ``timestamp``.
- ``json`` (anything else): the bag as JSON (``message_encoding: json``) with a JSON Schema inferred
  from the first bags; bytes are base64 strings marked ``contentEncoding: base64``.

A frame's or block's other keys (``frame_index``...) ride in protobuf field 1000 as msgpack: a
field the schema does not name, which protobuf readers skip and ``McapSource`` reads back, so a
replayed bag carries every key it was recorded with.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from foxglove_schemas_protobuf.RawAudio_pb2 import RawAudio
from foxglove_schemas_protobuf.RawImage_pb2 import RawImage
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from mcap_protobuf.schema import build_file_descriptor_set

from tatolab._sdk.audio import BAG_KEYS as AUDIO_KEYS
from tatolab._sdk.audio import SAMPLE_BYTES
from tatolab._surfaces.frame import BAG_KEYS as VIDEO_KEYS

EXTRA_FIELD = 1000
_EXTRA_TAG = bytes([0xC2, 0x3E])  # (1000 << 3) | 2 as a varint: a length-delimited field 1000
_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode
_msgpack_encode = msgspec.msgpack.Encoder().encode
_msgpack_decode = msgspec.msgpack.Decoder(dict).decode
SCHEMA_SAMPLE = 8  # bags a JSON channel's schema is inferred from


class NotRecorded(ValueError):
    """A message this module cannot turn back into a bag; the text says which and why."""


def kind_of(bag: Any) -> str:
    if isinstance(bag, dict):
        if "surface_id" in bag and {"width", "height", "format"} <= bag.keys():
            return "video"
        if {"samples", "sample_rate", "channels", "format"} <= bag.keys() and bag.get("format") in SAMPLE_BYTES:
            return "audio"
    return "json"


def protobuf_schema(kind: str) -> tuple[str, bytes]:
    message = RawImage if kind == "video" else RawAudio
    return message.DESCRIPTOR.full_name, build_file_descriptor_set(message).SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def extra_field(extra: dict[str, Any]) -> bytes:
    if not extra:
        return b""
    packed = _msgpack_encode(extra)
    return _EXTRA_TAG + _varint(len(packed)) + packed


def extra_of(message: Any) -> dict[str, Any]:
    for field in UnknownFieldSet(message):
        if field.field_number == EXTRA_FIELD and field.wire_type == 2:
            return _msgpack_decode(field.data)
    return {}


def _stamp(message: Any, ns: int) -> None:
    message.timestamp.seconds, message.timestamp.nanos = divmod(int(ns), 1_000_000_000)


_DATA_TAG = _varint((RawImage.DATA_FIELD_NUMBER << 3) | 2)


def encode_video(bag: dict[str, Any], pixels: Any, frame_id: str) -> bytes:
    """A video bag and its frame's pixels (bytes or a buffer) as a RawImage message.

    The pixels are appended as the ``data`` field by hand (protobuf fields may come in any order),
    so they are copied once, straight from the surface, rather than three times through protobuf."""
    height = int(bag["height"])
    pixels = memoryview(pixels).cast("B")
    image = RawImage(frame_id=frame_id, width=int(bag["width"]), height=height, encoding=str(bag["format"]),
                     step=len(pixels) // max(1, height))
    _stamp(image, bag.get("timestamp_ns") or 0)
    head = image.SerializeToString() + _DATA_TAG + _varint(len(pixels))
    extra = extra_field({k: v for k, v in bag.items() if k not in VIDEO_KEYS})
    return b"".join((head, pixels, extra))


def decode_video(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A RawImage message as (the bag less its surface id, the pixels)."""
    try:
        image = RawImage.FromString(data)
    except DecodeError as exc:
        raise NotRecorded(f"not a foxglove.RawImage message: {exc}") from None
    bag = {**extra_of(image), "width": image.width, "height": image.height, "format": image.encoding,
           "timestamp_ns": image.timestamp.seconds * 1_000_000_000 + image.timestamp.nanos}
    return bag, image.data


def encode_audio(bag: dict[str, Any]) -> bytes:
    block = RawAudio(data=bytes(bag["samples"]), format=f"pcm-{bag['format']}", sample_rate=int(bag["sample_rate"]),
                     number_of_channels=int(bag["channels"]))
    _stamp(block, bag.get("first_sample_timestamp_ns") or 0)
    return block.SerializeToString() + extra_field({k: v for k, v in bag.items() if k not in AUDIO_KEYS})


def decode_audio(data: bytes) -> dict[str, Any]:
    try:
        block = RawAudio.FromString(data)
    except DecodeError as exc:
        raise NotRecorded(f"not a foxglove.RawAudio message: {exc}") from None
    fmt = block.format.removeprefix("pcm-")
    if fmt not in SAMPLE_BYTES:
        raise NotRecorded(f"audio format {block.format!r}; McapSource replays pcm-s16 and pcm-f32")
    channels = max(1, block.number_of_channels)
    return {**extra_of(block), "samples": block.data, "sample_rate": block.sample_rate, "channels": channels,
            "format": fmt, "frames": len(block.data) // (SAMPLE_BYTES[fmt] * channels),
            "first_sample_timestamp_ns": block.timestamp.seconds * 1_000_000_000 + block.timestamp.nanos}


# --- JSON channels -------------------------------------------------------------------------------

def _schema_of(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "string", "contentEncoding": "base64"}
    if value is None:
        return {"type": "null"}
    if isinstance(value, dict):
        return {"type": "object", "properties": {str(k): _schema_of(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        items = [_schema_of(v) for v in value]
        merged = items[0] if items else {}
        for item in items[1:]:
            merged = _merge(merged, item)
        return {"type": "array", "items": merged}
    return {}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One schema both values fit: objects merge their properties, other differences widen."""
    if a == b or not b:
        return a
    if not a:
        return b
    if a.get("type") == b.get("type") == "object":
        props = dict(a.get("properties", {}))
        for key, sub in b.get("properties", {}).items():
            props[key] = _merge(props[key], sub) if key in props else sub
        return {"type": "object", "properties": props}
    if a.get("type") == b.get("type") == "array":
        return {"type": "array", "items": _merge(a.get("items", {}), b.get("items", {}))}
    if {a.get("type"), b.get("type")} == {"integer", "number"}:
        return {"type": "number"}
    found: set[str] = set()
    for side in (a, b):
        kind = side.get("type")
        found.update(kind if isinstance(kind, list) else [kind] if kind else [])
    types = sorted(found)
    return {"type": types} if types else {}


def infer_schema(bags: list[Any], title: str) -> dict[str, Any]:
    """A JSON Schema the first bags of an output fit (later bags may add keys: it allows more)."""
    schema: dict[str, Any] = {}
    for bag in bags:
        schema = _merge(schema, _schema_of(bag)) if schema else _schema_of(bag)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, **schema}


def encode_json(bag: Any) -> bytes:
    return _json_encode(bag)  # bytes as base64 strings, as the schema says


def decode_json(data: bytes, schema: dict[str, Any]) -> Any:
    try:
        value = _json_decode(data)
    except msgspec.DecodeError as exc:
        raise NotRecorded(f"not a JSON message: {exc}") from None
    return _restore(value, schema)


def _restore(value: Any, schema: dict[str, Any]) -> Any:
    """What JSON cannot say back: the strings the schema marks base64 are bytes again."""
    if schema.get("contentEncoding") == "base64" and isinstance(value, str):
        return base64.b64decode(value)
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: _restore(v, props[k]) if k in props else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict) and schema["items"]:
        return [_restore(v, schema["items"]) for v in value]
    return value
