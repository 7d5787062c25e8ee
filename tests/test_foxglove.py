"""The Foxglove app's live connection and playback (`tatolab foxglove`), spoken to by a client of
the Foxglove WebSocket protocol as the app speaks it: serverInfo, advertise, subscribe, messageData
(and, playing a recording, playbackControlRequest and playbackState), and refused in the handshake
to anyone without the link's token, another Unix user included."""

from __future__ import annotations

import ast
import json
import re
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from websockets.sync.client import connect

from harness import BIN, make_project, wait_for
from tatolab._runtime.foxglove import protocol

pytestmark = pytest.mark.slow

BLOB = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=20)
class Blob:
    @node.output()
    def blobs(self) -> dict: ...

    def __init__(self, config) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        ctx.outputs.write("blobs", {"n": self.n, "label": "blob", "pad": b"xy"})
        self.n += 1
"""

STREAM = """
from tatolab.stream import Exposure, StreamBuilder, TestPatternSource, stream
from nodes.blob import Blob


@stream
def live(stream_builder: StreamBuilder) -> None:
    blob = stream_builder.add(Blob, name="blob")
    stream_builder.expose(blob.output("blobs"), Exposure.PRIVATE)
    big = stream_builder.add(TestPatternSource, name="big", config={"width": 800, "height": 448, "fps": 15})
    stream_builder.expose(big.output("video"), Exposure.PRIVATE)
    small = stream_builder.add(TestPatternSource, name="small", config={"width": 160, "height": 96, "fps": 15})
    stream_builder.expose(small.output("video"), Exposure.PRIVATE)
"""


class FoxgloveClient:
    """A client of the protocol, as the Foxglove app is one: it keeps what the server said."""

    def __init__(self, url: str) -> None:
        self._connection = connect(url, subprotocols=["foxglove.sdk.v1"], max_size=None,  # type: ignore[list-item]
                                   open_timeout=30)
        self.ws = self._connection.__enter__()
        self.info: dict = {}
        self.channels: dict[str, dict] = {}  # topic -> advertised channel
        self.data: list[tuple[int, int, bytes]] = []
        self.states: list[tuple[int, int, float, bool, str]] = []
        self.texts: list[dict] = []

    def pump(self, until, timeout: float = 60.0, what: str = "the server") -> None:
        deadline = time.monotonic() + timeout
        while not until():
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}; heard: {self.texts[-5:]}"
            try:
                message = self.ws.recv(timeout=left)
            except TimeoutError:
                continue
            if isinstance(message, str):
                parsed = json.loads(message)
                self.texts.append(parsed)
                if parsed["op"] == "serverInfo":
                    self.info = parsed
                elif parsed["op"] == "advertise":
                    self.channels.update({c["topic"]: c for c in parsed["channels"]})
            elif message[0] == protocol.MESSAGE_DATA:
                self.data.append(protocol.parse_data(message))
            elif message[0] == protocol.PLAYBACK_STATE:
                state, now, speed, seek, length = __import__("struct").unpack_from("<BQfBI", message, 1)
                self.states.append((state, now, speed, bool(seek), message[19:19 + length].decode()))

    def subscribe(self, pairs: dict[int, int]) -> None:
        self.ws.send(json.dumps({"op": "subscribe",
                                 "subscriptions": [{"id": s, "channelId": c} for s, c in pairs.items()]}))

    def of(self, subscription: int) -> list[tuple[int, bytes]]:
        return [(t, d) for s, t, d in self.data if s == subscription]

    def close(self) -> None:
        self._connection.__exit__(None, None, None)


def raw_handshake(port: int, path: str) -> str:
    """What the server answers a WebSocket handshake at ``path`` (the status line and all after)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: foxglove.sdk.v1\r\n\r\n").encode())
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got.decode(errors="replace")


OTHER_USER_PROBE = """
import socket
port = PORT
answers = []
for path in ("/", "/?token=guess", "/?token="):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall((f"GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nUpgrade: websocket\\r\\n"
                  "Connection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n"
                  "Sec-WebSocket-Version: 13\\r\\nSec-WebSocket-Protocol: foxglove.sdk.v1\\r\\n\\r\\n").encode())
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sock.close()
    answers.append(got.decode(errors="replace"))
print(repr(answers))
"""


def test_the_app_sees_every_exposed_output_live_and_another_user_reads_nothing(
        runtime, project_venv, tmp_path, other_user):
    import av
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
    from foxglove_schemas_protobuf.RawImage_pb2 import RawImage

    project = make_project(tmp_path / "live", project_venv, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                              "nodes/blob.py": BLOB})
    runtime.cli("run", "-d", cwd=project, check=True)
    out = runtime.cli("foxglove", "live/blob/blobs", check=True).stdout.splitlines()
    link, url = out[0], out[1].split()[-1]
    assert link.startswith("https://app.foxglove.dev/?ds=foxglove-websocket&ds.url=")
    assert parse_qs(urlsplit(link).query)["ds.url"] == [url]
    port, token = urlsplit(url).port, parse_qs(urlsplit(url).query)["token"][0]
    assert port and len(token) >= 32
    # an internal output is named with the fix
    refused = runtime.cli("foxglove", "live/blob/nothing")
    assert refused.returncode != 0 and "live/blob/blobs" in refused.stderr, refused.stderr

    client = FoxgloveClient(url)
    try:
        client.pump(lambda: {"live/blob/blobs", "live/big/video", "live/small/video"} <= set(client.channels),
                    what="every exposed output advertised")
        assert client.info["op"] == "serverInfo" and client.ws.subprotocol == "foxglove.sdk.v1"
        blobs, big, small = (client.channels[t] for t in ("live/blob/blobs", "live/big/video", "live/small/video"))
        assert (blobs["encoding"], blobs["schemaEncoding"]) == ("json", "jsonschema")
        schema = json.loads(blobs["schema"])
        assert schema["properties"]["n"] == {"type": "integer"}
        assert schema["properties"]["pad"] == {"type": "string", "contentEncoding": "base64"}
        assert (big["encoding"], big["schemaName"]) == ("protobuf", "foxglove.CompressedVideo")
        assert (small["encoding"], small["schemaName"]) == ("protobuf", "foxglove.RawImage")

        client.subscribe({1: blobs["id"], 2: big["id"], 3: small["id"]})
        client.pump(lambda: len(client.of(1)) >= 20 and client.of(2) and client.of(3),
                    what="bags, a video frame and a small image")
        bags = [json.loads(d) for _, d in client.of(1)]
        ns = [b["n"] for b in bags]
        assert ns == list(range(ns[0], ns[0] + len(ns))), ns  # live and in order, none missed
        times = [t for t, _ in client.of(1)]
        assert times == sorted(times) and abs(times[-1] - time.time_ns()) < 60e9  # origin times, Unix clock

        # the first H.264 message a new subscriber gets is a keyframe a decoder opens on
        decoder = av.CodecContext.create("h264", "r")
        pictures = []
        for _, data in client.of(2)[:3]:
            video = CompressedVideo.FromString(data)
            assert video.format == "h264" and video.frame_id == "live/big/video"
            pictures += decoder.decode(av.Packet(video.data))
        assert pictures and (pictures[0].width, pictures[0].height) == (800, 448)
        image = RawImage.FromString(client.of(3)[0][1])
        assert (image.width, image.height, image.encoding) == (160, 96, "rgba8")
        assert len(image.data) == 160 * 96 * 4

        # another user who knows the port reads nothing: refused in the handshake, told no channel
        probe = other_user.python(OTHER_USER_PROBE.replace("PORT", str(port)), preload=("socket", "encodings.idna"))
        answers_out, err = probe.communicate(timeout=60)
        assert probe.returncode == 0, err
        answers = ast.literal_eval(answers_out)
        assert len(answers) == 3, err
        for answer in answers:
            assert answer.startswith("HTTP/1.1 403"), answer
            assert "advertise" not in answer and "live/" not in answer
        # nor does this user without the token
        assert raw_handshake(port, "/").startswith("HTTP/1.1 403")
    finally:
        client.close()
    # nobody subscribed any more: the feeds give their reader records back
    wait_for(lambda: _foxglove_readers(runtime) == 0, timeout=30, what="the readers given back")


def _foxglove_readers(runtime) -> int:
    graph = json.loads(runtime.cli("graph", "--stream", "live", check=True).stdout)
    assert graph["runtime"]["foxglove"]["serving"] is True
    (entry,) = graph["streams"]
    return sum(1 for n in entry["nodes"] for p in n["outputs"] for tap in p["taps"] if tap.get("foxglove"))


def _recording(path: Path, count: int = 50) -> None:
    from mcap.writer import Writer

    with open(path, "wb") as file:
        writer = Writer(file)
        writer.start()
        schema = writer.register_schema("tick", "jsonschema", json.dumps({"type": "object"}).encode())
        channel = writer.register_channel("ticks", "json", schema)
        for i in range(count):
            t = 1_700_000_000_000_000_000 + i * 100_000_000  # 10 a second, 5 s
            writer.add_message(channel, t, json.dumps({"i": i}).encode(), t)
        writer.finish()


def test_play_serves_a_recording_under_the_apps_seek_rate_and_pause(tmp_path):
    path = tmp_path / "rec.mcap"
    _recording(path)
    player = subprocess.Popen([str(BIN / "tatolab"), "foxglove", "--play", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert player.stdout is not None
        player.stdout.readline()
        url = player.stdout.readline().split()[-1]
        assert re.match(r"ws://127\.0\.0\.1:\d+/\?token=", url), url
        client = FoxgloveClient(url)
        client.pump(lambda: "ticks" in client.channels, what="the recording's channel")
        assert "playbackControl" in client.info["capabilities"]
        start = 1_700_000_000_000_000_000
        assert client.info["dataStartTime"] == {"sec": start // 10**9, "nsec": 0}
        client.subscribe({7: client.channels["ticks"]["id"]})
        # seek to 3 s and play at 4x: messages from 3 s on, the state says so
        seek = start + 3_000_000_000
        rid = "seek-1"
        client.ws.send(bytes([protocol.PLAYBACK_CONTROL]) + __import__("struct").pack(
            "<BfBQI", protocol.PLAY, 4.0, 1, seek, len(rid)) + rid.encode())
        client.pump(lambda: any(s[4] == rid for s in client.states), what="the seek's playback state")
        state = next(s for s in client.states if s[4] == rid)
        assert state[:4] == (protocol.PLAYING, seek, 4.0, True)
        client.pump(lambda: any(s[0] == protocol.ENDED for s in client.states), what="the end of the recording")
        got = [json.loads(d)["i"] for _, d in client.of(7)]
        assert got == list(range(30, 50)), got
        times = [t for t, _ in client.of(7)]
        assert times[0] == seek
        # pause: the state says paused
        client.ws.send(bytes([protocol.PLAYBACK_CONTROL]) + __import__("struct").pack(
            "<BfBQI", protocol.PAUSE, 1.0, 1, start, 5) + b"pause")
        client.pump(lambda: any(s[4] == "pause" for s in client.states), what="the pause's state")
        assert next(s for s in client.states if s[4] == "pause")[0] == protocol.PAUSED
        client.close()
        # without the token: refused
        port = urlsplit(url).port
        assert port is not None and raw_handshake(port, "/").startswith("HTTP/1.1 403")
    finally:
        player.terminate()
        player.communicate(timeout=30)
