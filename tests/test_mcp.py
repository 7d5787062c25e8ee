"""`tatolab mcp` launched as an MCP host launches it, driven by the mcp SDK's own client over stdio."""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from harness import BIN, Runtime, make_project, wait_for
from nodes_fixture import COUNTER, SINK

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

TOOLS = ["list_streams", "graph", "tap", "logs", "run_stream", "stop_stream", "start_stream", "remove_stream",
         "expose_port", "output_url"]

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

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, str, Any]:
        result = await self.session.call_tool(tool, arguments)
        text = "\n".join(block.text for block in result.content if block.type == "text")
        self.log.append({"call": tool, "arguments": arguments, "is_error": result.is_error, "text": text})
        return result.is_error, text, result.structured_content


@asynccontextmanager
async def mcp_session(rt: Runtime, tmp_path: Path) -> AsyncIterator[Session]:
    params = StdioServerParameters(command=str(BIN / "tatolab"), args=["mcp"], env=rt.env, cwd=str(tmp_path))
    with open(tmp_path / "mcp-stderr.txt", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
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
def test_an_agent_runs_inspects_taps_and_removes_a_stream_over_mcp(runtime, project_venv, tmp_path):
    folder = project(tmp_path, project_venv)

    async def session() -> None:
        async with asyncio.timeout(180), mcp_session(runtime, tmp_path) as s:
            listed = await s.session.list_tools()
            assert [t.name for t in listed.tools] == TOOLS
            tap_tool = next(t for t in listed.tools if t.name == "tap")
            assert "address" in tap_tool.input_schema["required"]
            assert "Read the bags the output at `address` writes" in tap_tool.description  # the operation's own words

            error, text, started = await s.call("run_stream", project=str(folder))
            assert not error, text
            assert started["name"] == "counting" and started["nodes"] == 3

            error, text, streams = await s.call("list_streams")
            assert not error, text
            assert [row["name"] for row in streams["streams"]] == ["counting"]

            error, text, graph = await s.call("graph", stream="counting")
            assert not error, text
            (only,) = graph["streams"]
            assert sorted(n["name"] for n in only["nodes"]) == ["chatty", "counter", "sink"]

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
            error, text, _ = await s.call("stop_stream", name="nosuch")
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

            error, text, _ = await s.call("stop_stream", name="counting")
            assert not error, text
            wait_for(lambda: runtime.node_pids() == [], timeout=30, what="the stream's nodes to stop")
            error, text, _ = await s.call("start_stream", name="counting")
            assert not error, text
            error, text, _ = await s.call("remove_stream", name="counting")
            assert not error, text
            error, text, streams = await s.call("list_streams")
            assert not error and streams["streams"] == [], text

    asyncio.run(session())
    assert runtime.stream_names() == []


@pytest.mark.slow
def test_with_no_runtime_every_tool_says_so_and_the_session_serves_once_one_starts(tmp_path):
    rt = Runtime(tmp_path / "rt")  # not started yet
    no_runtime = rt.cli("streams").stderr.strip()
    assert no_runtime.startswith("error: no runtime is running on this machine")

    async def session() -> None:
        async with asyncio.timeout(120), mcp_session(rt, tmp_path) as s:
            listed = await s.session.list_tools()
            assert [t.name for t in listed.tools] == TOOLS
            for tool, arguments in [("list_streams", {}), ("graph", {}), ("stop_stream", {"name": "cam"}),
                                    ("tap", {"address": "cam/src/out"})]:
                error, text, _ = await s.call(tool, **arguments)
                assert error and text == no_runtime, (tool, text)
            await asyncio.to_thread(rt.start)
            error, text, streams = await s.call("list_streams")
            assert not error, text
            assert streams["streams"] == []

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
    assert description(BY_NAME["stop_stream"], OPS["stop"].schema()).startswith("Unload stream `name`")
