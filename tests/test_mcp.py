"""`tatolab mcp` launched as an MCP host launches it, driven by the mcp SDK's own client over stdio."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import zlib
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from harness import BIN, Runtime, make_project, wait_for
from nodes_fixture import COUNTER, SINK
from tatolab._sdk.builtins import builtin
from tatolab.stream import node

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.shared.exceptions import MCPError as McpError  # noqa: E402

TOOLS = ["list_streams", "graph", "slowest_paths", "tap", "logs", "exchange", "run_stream", "stop_stream", "start_stream",
         "remove_stream", "expose_port", "output_url", "share_output", "list_tokens", "revoke_token", "rotate_token_key",
         "add_node", "connect", "disconnect", "remove_node", "record_start", "record_stop", "record_trigger", "recordings", "foxglove_link"]
# The docs' text ("The runtime", Manage streams), character for character, for XDG_RUNTIME_DIR=/run/user/1000.
DOCS_NO_RUNTIME = (
    "error: no runtime is running on this machine: nothing answers at /run/user/1000/streamlib/local-api.sock. "
    "Start one by running `tatolabd` in a terminal."
)
PROMPTS = ["inspect_stream", "find_dropped_bags", "add_node_and_wire"]

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink
from nodes.chatty import Chatty


@stream
def counting(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter, name="counter")
    sink = stream_builder.add(OrderedSink, name="sink", config={"path": "rows.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
    stream_builder.add(Chatty, name="chatty")
"""

CHATTY = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=100)
class Chatty:
    '''Says hello ten times a second, counting.'''

    @node.output()
    def out(self) -> dict: ...

    def __init__(self) -> None:
        self.n = 0

    def process(self, ctx) -> None:
        self.n += 1
        ctx.log.info("hello", n=self.n)
"""

TRANSCRIPT = os.environ.get("TATOLAB_MCP_TRANSCRIPT")  # a file to write the session to (docs/agents.md)


class Session:
    """An MCP client session with `tatolab mcp`; each call returns (is_error, text, structured)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.log: list[dict[str, Any]] = []

        self.notices: list[Any] = []  # the notifications the server sent
        self.noticed = asyncio.Event()

    async def call_tool(self, tool: str, **arguments: Any) -> Any:
        result = await self.session.call_tool(tool, arguments)
        blocks = [block.text if block.type == "text" else f"[{block.mime_type} image, {len(block.data)} base64 characters]"
                  for block in result.content]
        self.log.append({"call": tool, "arguments": arguments, "is_error": result.is_error, "blocks": blocks})
        return result

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, str, Any]:
        """(is_error, the first text block: the answer, or the error in the CLI's words, structured)"""
        result = await self.call_tool(tool, **arguments)
        texts = [block.text for block in result.content if block.type == "text"]
        return result.is_error, texts[0] if texts else "", result.structured_content

    async def read(self, uri: str) -> Any:
        result = await self.session.read_resource(uri)
        (content,) = result.contents
        self.log.append({"read": uri, "text": content.text})
        return json.loads(content.text)

    async def tools(self) -> list[Any]:
        listed = await self.session.list_tools()
        self.log.append({"list": "tools", "names": [t.name for t in listed.tools]})
        return listed.tools

    async def resources(self) -> list[str]:
        listed = await self.session.list_resources()
        uris = [str(r.uri) for r in listed.resources]
        self.log.append({"list": "resources", "names": uris})
        return uris

    async def prompt(self, name: str, **arguments: str) -> str:
        got = await self.session.get_prompt(name, arguments)
        text = got.messages[0].content.text
        self.log.append({"prompt": name, "arguments": arguments, "text": text})
        return text

    async def handle(self, message: Any) -> None:
        self.notices.append(message)
        self.noticed.set()

    async def notice(self, method: str, uri: str | None = None, timeout: float = 30) -> None:
        """Wait for a notification ``method`` (about ``uri``) not yet waited for."""
        async with asyncio.timeout(timeout):
            while True:
                for i, message in enumerate(self.notices):
                    if getattr(message, "method", None) == method and (
                            uri is None or str(message.params.uri) == uri):
                        del self.notices[i]
                        return
                self.noticed.clear()
                await self.noticed.wait()


@asynccontextmanager
async def mcp_session(rt: Runtime, tmp_path: Path) -> AsyncIterator[Session]:
    params = StdioServerParameters(command=str(BIN / "tatolab"), args=["mcp"], env=rt.env, cwd=str(tmp_path))
    with open(tmp_path / "mcp-stderr.txt", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            wrapped: Session | None = None

            async def handle(message: Any) -> None:
                if wrapped is not None:
                    await wrapped.handle(message)

            async with ClientSession(read, write, message_handler=handle) as session:
                await session.initialize()
                wrapped = Session(session)
                try:
                    yield wrapped
                finally:
                    if TRANSCRIPT:
                        with open(TRANSCRIPT, "a") as out:
                            out.write(json.dumps(wrapped.log, indent=2) + "\n")


def project(tmp_path: Path, venv: Path) -> Path:
    return make_project(tmp_path / "counting", venv, {
        "stream.py": STREAM, "nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/sinks.py": SINK,
        "nodes/chatty.py": CHATTY,
    })


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # a handshake-era client subscribes so
def test_an_agent_runs_inspects_taps_and_removes_a_stream_over_mcp(runtime, project_venv, tmp_path):
    folder = project(tmp_path, project_venv)

    async def session() -> None:
        async with asyncio.timeout(180), mcp_session(runtime, tmp_path) as s:
            tools = await s.tools()
            assert [t.name for t in tools] == TOOLS
            tap_tool = next(t for t in tools if t.name == "tap")
            assert "address" in tap_tool.input_schema["required"]
            assert "Read the bags the output at `address` writes" in tap_tool.description  # the operation's own words

            assert await s.resources() == ["tatolab://catalog"]  # no stream yet
            prompts = await s.session.list_prompts()
            assert [p.name for p in prompts.prompts] == PROMPTS

            error, text, started = await s.call("run_stream", project=str(folder))
            assert not error, text
            assert started["name"] == "counting" and started["nodes"] == 3
            await s.notice("notifications/resources/list_changed")  # a stream loaded: one more graph
            graph_uri = "tatolab://streams/counting/graph"
            assert await s.resources() == ["tatolab://catalog", graph_uri]

            # The catalog: every built-in with its config schema and ports, and the streams' Python nodes.
            catalog = await s.read("tatolab://catalog")
            builtins = {entry["name"]: entry for entry in catalog["builtins"]}
            pattern = builtins["TestPatternSource"]
            assert pattern["outputs"] == [{"port": "video"}] and "Colour bars" in pattern["doc"]
            assert pattern["config_schema"]["properties"]["fps"] == {"type": "number", "default": 30.0}
            assert builtins["GlslPixelEffect"]["inputs"] == [{"port": "video", "delivery_profile": "newest"}]
            python = {entry["class"]: entry for entry in catalog["python_nodes"]}
            assert python["nodes.chatty:Chatty"]["doc"] == "Says hello ten times a second, counting."
            assert python["nodes.chatty:Chatty"]["used_by"] == ["counting/chatty"]
            assert python["nodes.counter:Counter"]["outputs"] == [{"port": "counts"}]
            graph = await s.read(graph_uri)
            assert sorted(n["name"] for n in graph["nodes"]) == ["chatty", "counter", "sink"]
            await s.session.subscribe_resource(graph_uri)

            steps = await s.prompt("inspect_stream", stream="counting")
            assert 'graph(stream="counting")' in steps and 'logs(stream="counting"' in steps

            # A refusal: the CLI's words, word for word, then its fixes as tool calls; the session goes on.
            error, text, refused = await s.call("run_stream", project=str(folder), mode="attached")
            assert error
            assert text == runtime.cli("run", "--dir", str(folder)).stderr.strip()
            assert [(f["tool"], f["arguments"]) for f in refused["fixes"]] == [
                ("remove_stream", {"stream": "counting"}), ("run_stream", {"name": None})]
            assert refused["fixes"][0]["call"] == 'remove_stream(stream="counting")'

            error, text, streams = await s.call("list_streams")
            assert not error, text
            assert [row["name"] for row in streams["streams"]] == ["counting"]

            error, text, graph = await s.call("graph", stream="counting")
            assert not error, text
            (only,) = graph["streams"]
            assert sorted(n["name"] for n in only["nodes"]) == ["chatty", "counter", "sink"]

            # slowest_paths answers its output schema's shape (the client checks it against it)
            error, text, late = await s.call("slowest_paths", stream="counting", limit=3)
            assert not error, text
            assert all({"stream", "to", "slowest_link", "slowest_node"} <= set(p) for p in late["paths"])

            error, text, tapped = await s.call("tap", address="counting/counter/counts", count=3, timeout=20)
            assert not error, text
            assert [b["n"] for b in tapped["bags"]] == [1, 2, 3]
            assert tapped["end"]["got"] == 3
            counts = [b["bag"]["n"] for b in tapped["bags"]]
            assert counts == sorted(counts)

            # A bad argument is a tool error naming it, and the session goes on.
            error, text, _ = await s.call("tap", address="counting/counter/counts", count="three")
            assert error and text.startswith("error: bad arguments for tap: count:"), text
            # A refusal reads as the CLI's, word for word.
            error, text, _ = await s.call("stop_stream", stream="nosuch")
            assert error
            assert text == runtime.cli("stop", "nosuch").stderr.strip()

            def said_hello() -> bool:
                return '"hello"' in runtime.cli("logs", "--stream", "counting", "--node", "chatty", "--json").stdout

            wait_for(said_hello, timeout=30, what="the chatty node to log")
            error, text, logs = await s.call("logs", stream="counting", node="chatty", tail=3)
            assert not error, text
            assert 0 < len(logs["records"]) <= 3
            assert all(r["node"] == "chatty" for r in logs["records"]), logs["records"]
            assert any(r["message"] == "hello" for r in logs["records"]), logs["records"]

            error, text, _ = await s.call("stop_stream", stream="counting")
            assert not error, text
            await s.notice("notifications/resources/updated", graph_uri)  # its nodes stopped
            wait_for(lambda: runtime.node_pids() == [], timeout=30, what="the stream's nodes to stop")
            error, text, _ = await s.call("start_stream", stream="counting")
            assert not error, text
            await s.notice("notifications/resources/updated", graph_uri)  # started again
            error, text, _ = await s.call("remove_stream", stream="counting")
            assert not error, text
            await s.notice("notifications/resources/list_changed")  # its graph is gone
            listed = await s.session.list_resources()
            assert [str(r.uri) for r in listed.resources] == ["tatolab://catalog"]
            error, text, streams = await s.call("list_streams")
            assert not error and streams["streams"] == [], text

    asyncio.run(session())
    assert runtime.stream_names() == []


@pytest.mark.slow
def test_with_no_runtime_every_tool_says_so_and_the_session_serves_once_one_starts(tmp_path):
    rt = Runtime(tmp_path / "rt")  # not started yet
    no_runtime = DOCS_NO_RUNTIME.replace("/run/user/1000", rt.env["XDG_RUNTIME_DIR"])
    assert rt.cli("streams").stderr.strip() == no_runtime

    async def session() -> None:
        async with asyncio.timeout(120), mcp_session(rt, tmp_path) as s:
            listed = await s.session.list_tools()
            assert [t.name for t in listed.tools] == TOOLS
            for tool, arguments in [("list_streams", {}), ("graph", {}), ("stop_stream", {"stream": "cam"}),
                                    ("tap", {"address": "cam/src/out"}), ("exchange", {"address": "cam/src/video"})]:
                error, text, _ = await s.call(tool, **arguments)
                assert error and text == no_runtime, (tool, text)
            # the built-ins need no runtime to read about; a stream's graph does
            listed = await s.session.list_resources()
            assert [str(r.uri) for r in listed.resources] == ["tatolab://catalog"]
            catalog = await s.read("tatolab://catalog")
            assert "TestPatternSource" in [entry["name"] for entry in catalog["builtins"]]
            assert catalog["python_nodes"] is None
            with pytest.raises(McpError) as refused:
                await s.session.read_resource("tatolab://streams/cam/graph")
            assert str(refused.value) == no_runtime

            await asyncio.to_thread(rt.start)
            error, text, streams = await s.call("list_streams")
            assert not error, text
            assert streams["streams"] == []
            with pytest.raises(McpError) as refused:
                await s.session.read_resource("tatolab://streams/cam/graph")
            assert "cam" in str(refused.value)
            error, text, _ = await s.call("graph")
            assert not error, text

    asyncio.run(session())


@pytest.mark.slow
def test_a_stream_run_attached_is_unloaded_when_the_mcp_session_ends(runtime, project_venv, tmp_path):
    folder = project(tmp_path, project_venv)

    async def session() -> None:
        async with asyncio.timeout(120), mcp_session(runtime, tmp_path) as s:
            error, text, started = await s.call("run_stream", project=str(folder), mode="attached")
            assert not error, text
            assert started["name"] == "counting"
            error, text, streams = await s.call("list_streams")
            assert not error, text
            assert [(row["name"], row["state"]) for row in streams["streams"]] == [("counting", "attached")]
            error, text, tapped = await s.call("tap", address="counting/counter/counts", count=2, timeout=20)
            assert not error and tapped["end"]["got"] == 2, text

    asyncio.run(session())
    wait_for(lambda: runtime.stream_names() == [], timeout=30, what="the attached stream to be unloaded")
    wait_for(lambda: runtime.node_pids() == [], timeout=30, what="its nodes to stop")


def test_each_tool_takes_its_operations_arguments_less_what_it_fixes():
    from tatolab._mcp.tools import BY_NAME, description, input_schema
    from tatolab._runtime.ops import OPS, load_all

    load_all()
    assert set(TOOLS) == set(BY_NAME) and all(BY_NAME[t].op in OPS for t in TOOLS)
    tap = input_schema(BY_NAME["tap"], OPS["tap"].schema())
    assert tap["required"] == ["address"] and tap["properties"]["count"]["maximum"] == 50
    logs = input_schema(BY_NAME["logs"], OPS["logs"].schema())
    assert "follow" not in logs["properties"] and logs["required"] == ["stream"]
    run = input_schema(BY_NAME["run_stream"], OPS["load"].schema())
    assert "env" not in run["properties"] and run["properties"]["mode"]["default"] == "kept"
    assert description(BY_NAME["stop_stream"], OPS["stop"].schema()).startswith("Unload stream `stream`")
    # every tool about one stream takes `stream`, whatever the operation calls it
    for tool in ("stop_stream", "start_stream", "remove_stream"):
        schema = input_schema(BY_NAME[tool], OPS[BY_NAME[tool].op].schema())
        assert schema["required"] == ["stream"] and list(schema["properties"]) == ["stream"], tool
    exchange = input_schema(BY_NAME["exchange"], OPS["exchange"].schema())
    assert "count" not in exchange["properties"] and exchange["properties"]["frames"]["maximum"] == 4



def test_a_bad_argument_is_named_with_what_the_tool_takes():
    from tatolab._mcp.server import Failed, _checked
    from tatolab._mcp.tools import BY_NAME
    from tatolab._runtime.ops import OPS, load_all

    load_all()
    add = OPS["add_node"].schema()
    words = []
    for arguments in ({"stream": "cam", "name": "p", "node_class": "TestPatternSource", "config": "fps=3"},
                      {"name": "p", "node_class": "TestPatternSource"}):
        with pytest.raises(Failed) as refused:
            _checked(BY_NAME["add_node"], arguments, add)
        words.append(str(refused.value))
    assert words == [
        'error: bad arguments for add_node: config: "fps=3" is not a JSON object or null; add_node takes stream, '
        "name, node_class (required) and config",
        "error: bad arguments for add_node: 'stream' is a required property; add_node takes stream, name, "
        "node_class (required) and config"]


PATTERN = """
from tatolab.stream import StreamBuilder, TestPatternSource, stream


@stream
def bars(stream_builder: StreamBuilder) -> None:
    stream_builder.add(TestPatternSource, name="pattern", config={"width": 320, "height": 180, "fps": 4})
"""

# TestPatternSource's bars, left to right (RGBA)
BARS = [(255, 255, 255, 255), (255, 255, 0, 255), (0, 255, 255, 255), (0, 255, 0, 255),
        (255, 0, 255, 255), (255, 0, 0, 255), (0, 0, 255, 255), (0, 0, 0, 255)]


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGBA bytes) of an 8-bit RGBA PNG whose rows use filter 0, as exchange writes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        tag, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        header = body if tag == b"IHDR" else header
        idat += body if tag == b"IDAT" else b""
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert (depth, colour) == (8, 6)
    raw = zlib.decompress(idat)
    stride = 1 + width * 4
    rows = [raw[y * stride:(y + 1) * stride] for y in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


@pytest.mark.slow
def test_exchange_hands_the_agent_the_frame_as_a_png_image(runtime, project_venv, tmp_path):
    folder = make_project(tmp_path / "bars", project_venv, {"stream.py": PATTERN})

    async def session() -> None:
        async with asyncio.timeout(120), mcp_session(runtime, tmp_path) as s:
            error, text, _ = await s.call("run_stream", project=str(folder), mode="attached")
            assert not error, text
            result = await s.call_tool("exchange", address="bars/pattern/video", timeout=20)
            assert not result.is_error, result.content
            described, image = result.content
            assert image.type == "image" and image.mime_type == "image/png"
            frame = json.loads(described.text)
            assert (frame["address"], frame["width"], frame["height"]) == ("bars/pattern/video", 320, 180)
            width, height, rows = decode_png(base64.b64decode(image.data))
            assert (width, height) == (320, 180)
            row = rows[height // 4]  # above the band the white square crosses
            centres = [tuple(row[4 * ((2 * k + 1) * width // 16):][:4]) for k in range(8)]
            assert centres == BARS

            # the same frame by its surface id, as a tap shows it (32 slots at 4 frames a second: it stays for seconds)
            by_id = await s.session.call_tool("exchange", {"surface_id": frame["surface_id"]})
            assert not by_id.is_error, by_id.content
            assert base64.b64decode(by_id.content[1].data) == base64.b64decode(image.data)
            error, text, _ = await s.call("exchange", address="bars/nosuch/video")
            assert error and text.startswith("error: "), text
            error, text, _ = await s.call("exchange")
            assert error and "`address`" in text, text
            error, text, _ = await s.call("tap", address="bars/pattern/video", count=1, timeout=20)
            assert not error and "surface_id" in text, text

    asyncio.run(session())


@pytest.mark.slow
def test_a_2026_client_hears_of_streams_and_graph_changes_on_a_listen_stream(runtime, project_venv, tmp_path):
    """The SDK's own Client speaks the 2026-07-28 protocol where the server does: changes come on
    `subscriptions/listen` rather than as loose notifications."""
    from mcp import Client
    from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated

    folder = project(tmp_path, project_venv)
    graph_uri = "tatolab://streams/counting/graph"
    params = StdioServerParameters(command=str(BIN / "tatolab"), args=["mcp"], env=runtime.env, cwd=str(tmp_path))

    async def session() -> None:
        async with asyncio.timeout(120), Client(params) as client:
            assert client.session.protocol_version == "2026-07-28"
            events: list[Any] = []
            arrived = asyncio.Event()

            async def until(event: Any) -> None:
                while event not in events:
                    arrived.clear()
                    await arrived.wait()
                events.remove(event)

            async with client.listen(resources_list_changed=True, resource_subscriptions=[graph_uri]) as sub:
                async def collect() -> None:
                    async for event in sub:
                        events.append(event)
                        arrived.set()

                collecting = asyncio.create_task(collect())
                started = await client.call_tool("run_stream", {"project": str(folder), "mode": "attached"})
                assert not started.is_error, started.content
                await until(ResourcesListChanged())
                await until(ResourceUpdated(graph_uri))
                listed = await client.list_resources()
                assert graph_uri in [str(r.uri) for r in listed.resources]
                stopped = await client.call_tool("stop_stream", {"stream": "counting"})
                assert not stopped.is_error, stopped.content
                await until(ResourcesListChanged())
                await until(ResourceUpdated(graph_uri))
                collecting.cancel()

    asyncio.run(session())
    assert runtime.stream_names() == []


@dataclass
class BeepConfig:
    hz: float = 440.0


@builtin("tatolab._builtins.beep:Beeper")
@node(execution="manual")
class Beeper:
    """Beeps at ``hz``."""

    @node.output()
    def audio(self) -> dict: ...

    def __init__(self, config: BeepConfig) -> None: ...


def test_the_catalog_lists_whatever_the_builtins_package_exports(monkeypatch):
    """A family module added to tatolab._sdk.builtins shows up with nothing to list by hand."""
    from tatolab._mcp.catalog import builtin_nodes
    from tatolab._sdk import builtins

    monkeypatch.setattr(builtins, "Beeper", Beeper, raising=False)
    entries = {entry["name"]: entry for entry in builtin_nodes()}
    assert {"TestPatternSource", "GlslPixelEffect", "Beeper"} <= set(entries)
    beeper = entries["Beeper"]
    assert beeper["doc"] == "Beeps at ``hz``." and beeper["outputs"] == [{"port": "audio"}]
    assert beeper["config_schema"]["properties"] == {"hz": {"type": "number", "default": 440.0}}
    assert "CounterConfig" not in entries and "builtin" not in entries  # not nodes


def test_a_refusals_fixes_read_as_tool_calls_under_the_tools_argument_names():
    from tatolab._control.errors import ControlError, Fix
    from tatolab._mcp.calls import in_words, tool_calls

    refused = ControlError("a stream named cam is kept", code="name_kept", fixes=[
        Fix("rm", {"name": "cam"}, "remove it first"), Fix("load", {"name": None}, "load it under another name"),
        Fix("start", {"name": "cam"}, "retries it"), Fix("expose", {"address": "cam/src/out"}, "exposes it"),
        Fix("sdk", {"project": "/p"}, "installs the SDK")])  # no tool runs `sdk`: it stays in the CLI's words
    calls = tool_calls(refused)
    assert [c["call"] for c in calls] == ['remove_stream(stream="cam")', "run_stream(name=…)",
                                          'start_stream(stream="cam")', 'expose_port(address="cam/src/out")']
    assert calls[0]["arguments"] == {"stream": "cam"} and calls[0]["does"] == "remove it first"
    assert in_words(calls[:1]) == 'fixes as tool calls: remove_stream(stream="cam") (remove it first)'


def test_each_prompts_steps_are_calls_of_tools_by_name():
    from tatolab._mcp.prompts import BY_NAME

    assert list(BY_NAME) == PROMPTS
    wire = BY_NAME["add_node_and_wire"].text({"stream": "cam", "node": "TestPatternSource"})
    assert 'add_node(stream="cam", name="<a new node name>", node_class="TestPatternSource"' in wire
    assert 'connect(stream="cam", output="<from_output>"' in wire and "tatolab://catalog" in wire
    drops = BY_NAME["find_dropped_bags"].text({"stream": "cam"})
    assert drops.count('graph(stream="cam")') == 2 and 'logs(stream="cam", node="<reader>"' in drops


@pytest.mark.slow
def test_run_stream_refuses_another_users_project_naming_its_owner(runtime, project_venv, tmp_path, other_user):
    folder = project(tmp_path, project_venv)
    for root, folders, files in os.walk(folder):  # the project, handed to the other user (the .venv link too)
        for name in [root, *(os.path.join(root, f) for f in folders + files)]:
            os.lchown(name, other_user.uid, other_user.gid)

    async def session() -> None:
        async with asyncio.timeout(120), mcp_session(runtime, tmp_path) as s:
            error, text, _ = await s.call("run_stream", project=str(folder))
            assert error
            assert f"{folder} belongs to {other_user.name} (uid {other_user.uid}), so Tatolab will not run" in text
            assert f"`tatolab trust {folder}`" in text

    asyncio.run(session())
    assert runtime.stream_names() == []
