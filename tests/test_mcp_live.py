"""An agent changes a running graph over MCP: `tatolab mcp` driven by the mcp SDK's client over stdio."""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from harness import BIN, Runtime, wait_for
from test_live_changes import counting_project, graph_of, running_pids
from test_share import source_project

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

CHANGE_TOOLS = ["add_node", "connect", "disconnect", "remove_node"]
TRANSCRIPT = os.environ.get("TATOLAB_MCP_TRANSCRIPT")  # a file to write the session to (docs/agents.md)


class Session:
    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.log: list[dict[str, Any]] = []

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, str, Any]:
        result = await self.session.call_tool(tool, arguments)
        text = "\n".join(block.text for block in result.content if block.type == "text")
        self.log.append({"call": tool, "arguments": arguments, "is_error": result.is_error, "text": text})
        return result.is_error, text, result.structured_content


@asynccontextmanager
async def session_with(rt: Runtime, tmp_path: Path) -> AsyncIterator[Session]:
    params = StdioServerParameters(command=str(BIN / "tatolab"), args=["mcp"], env=rt.env, cwd=str(tmp_path))
    with open(tmp_path / "mcp-stderr.txt", "a") as errlog:
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


@pytest.mark.slow
def test_an_agent_adds_links_taps_and_removes_a_node_and_the_kept_stream_comes_back_as_recorded(project_venv,
                                                                                               tmp_path):
    folder = counting_project(tmp_path, project_venv)
    rt = Runtime(tmp_path / "rt").start()

    async def changing() -> dict[str, int]:
        async with asyncio.timeout(180), session_with(rt, tmp_path) as s:
            tools = {t.name: t for t in (await s.session.list_tools()).tools}
            assert set(CHANGE_TOOLS) <= set(tools)
            for name in CHANGE_TOOLS:
                assert "a kept stream loads as recorded after a restart" in tools[name].description, name
                assert "stream" in tools[name].input_schema["required"], name
            error, text, _ = await s.call("run_stream", project=str(folder))
            assert not error, text
            before = await asyncio.to_thread(running_pids, rt, "counting", {"counter", "sink"})

            error, text, added = await s.call("add_node", stream="counting", name="doubler",
                                              node_class="nodes.doubler:Doubler")
            assert not error, text
            assert added["outputs"] == ["doubled"] and added["kept"] is True
            assert added["state"] == "waiting" and added["pid"]  # running, set up; unlinked, so no bags yet
            error, text, linked = await s.call("connect", stream="counting", output="counter/counts",
                                               input="doubler/numbers")
            assert not error and linked["state"] == "wired", text
            error, text, tap = await s.call("tap", address="counting/doubler/doubled", count=3, timeout=20)
            assert not error, text
            assert [b["bag"]["doubled"] for b in tap["bags"]] == [b["bag"]["n"] * 2 for b in tap["bags"]]
            assert tap["end"]["got"] == 3

            # A refusal is a tool error in the CLI's words, and the session goes on.
            error, text, _ = await s.call("connect", stream="counting", output="counter/counts", input="doubler/nope")
            assert error and text == ("error: node doubler (nodes.doubler:Doubler) of stream counting has no input "
                                      "named nope; its inputs: numbers; its outputs: doubled"), text
            error, text, _ = await s.call("connect", stream="counting", output="counter/counts",
                                          input="doubler/numbers")
            assert error and "already connected" in text and "`tatolab link rm" in text, text
            error, text, _ = await s.call("add_node", stream="counting", name="probe", node_class="NoSuchSource")
            assert error and text.startswith("error: cannot add node probe to stream counting: 'NoSuchSource' is "
                                             "not a built-in node; the built-ins: "), text
            error, text, _ = await s.call("add_node", stream="counting", name="probe")
            assert error and text.startswith("error: bad arguments for add_node"), text

            error, text, graph = await s.call("graph", stream="counting")
            assert not error, text
            (entry,) = graph["streams"]
            assert entry["changed_since_recorded"] is True
            assert [c["change"] for c in entry["changes"]] == ["add_node", "connect"]
            now = {n["name"]: n["pid"] for n in entry["nodes"]}
            assert {k: now[k] for k in before} == before and now["doubler"] == added["pid"]

            error, text, removed = await s.call("remove_node", stream="counting", name="doubler")
            assert not error, text
            assert removed["links"] == ["counter/counts->doubler/numbers"]
            wait_for(lambda: {n["name"]: n["pid"] for n in graph_of(rt, "counting")["nodes"]} == before,
                     timeout=30, what="doubler gone and the other nodes as they were")
            # changed again, so the restart below has something to drop
            error, text, _ = await s.call("disconnect", stream="counting", output="counting/counter/counts",
                                          input="sink/rows")
            assert not error, text
            return before

    asyncio.run(changing())
    try:
        rt.stop()
        rt.start()

        async def after_restart() -> None:
            async with asyncio.timeout(120), session_with(rt, tmp_path) as s:
                def loaded() -> bool:
                    return [n["name"] for n in graph_of(rt, "counting")["nodes"]] == ["counter", "sink"]

                await asyncio.to_thread(wait_for, lambda: rt.stream_names() == ["counting"], 60, "counting to load")
                await asyncio.to_thread(wait_for, loaded, 60, "counting as recorded")
                error, text, graph = await s.call("graph", stream="counting")
                assert not error, text
                (entry,) = graph["streams"]
                assert entry["changed_since_recorded"] is False and entry["changes"] == []
                assert [link["key"] for link in entry["links"]] == ["counter/counts->sink/rows"]
                error, text, _ = await s.call("remove_stream", stream="counting")
                assert not error, text

        asyncio.run(after_restart())
    finally:
        rt.stop()
    assert rt.leftover_processes() == [] and rt.shm_files() == []


@pytest.mark.slow
def test_an_agent_links_another_streams_exposed_output_live_and_taps_it_at_its_own_node(runtime, project_venv,
                                                                                       tmp_path):
    source = source_project(tmp_path / "source", project_venv, expose="")  # its output is internal at first
    folder = counting_project(tmp_path, project_venv)

    async def linking() -> None:
        async with asyncio.timeout(180), session_with(runtime, tmp_path) as s:
            for project in (source, folder):
                error, text, _ = await s.call("run_stream", project=str(project))
                assert not error, text
            (counter_pid,) = (await asyncio.to_thread(running_pids, runtime, "source", {"counter"})).values()
            before = await asyncio.to_thread(running_pids, runtime, "counting", {"counter", "sink"})

            error, text, added = await s.call("add_node", stream="counting", name="doubler",
                                              node_class="nodes.doubler:Doubler")
            assert not error and added["state"] == "waiting" and added["pid"], text
            error, text, linked = await s.call("connect", stream="counting", output="source/counter/counts",
                                               input="doubler/numbers")
            assert not error, text
            assert linked["link"] == "source/counter/counts->doubler/numbers" and linked["state"] == "waiting"
            assert "source/counter/counts is internal" in linked["reason"]
            assert linked["why"]["fixes"] == [{"op": "expose", "args": {"address": "source/counter/counts"},
                                               "does": "exposes it"}]
            assert [call["call"] for call in linked["fix_calls"]] == ['expose_port(address="source/counter/counts")']

            error, text, _ = await s.call("expose_port", address="source/counter/counts")
            assert not error, text

            def wired() -> bool:
                links = {link["key"]: link for link in graph_of(runtime, "counting")["links"]}
                return links["source/counter/counts->doubler/numbers"]["state"] == "wired"

            await asyncio.to_thread(wait_for, wired, 30, "the live remote link to wire once exposed")
            error, text, tap = await s.call("tap", address="counting/doubler/doubled", count=3, timeout=20)
            assert not error and tap["end"]["got"] == 3, text
            bags = [b["bag"] for b in tap["bags"]]
            assert {bag["pid"] for bag in bags} == {counter_pid}  # source's counter wrote them, not counting's own
            assert [bag["doubled"] for bag in bags] == [bag["n"] * 2 for bag in bags]

            error, text, _ = await s.call("disconnect", stream="counting", output="source/counter/counts",
                                          input="doubler/numbers")
            assert not error, text
            now = graph_of(runtime, "counting")
            assert [link["key"] for link in now["links"]] == ["counter/counts->sink/rows"]
            assert {n["name"]: n["pid"] for n in now["nodes"] if n["name"] in before} == before
            for stream in ("counting", "source"):
                error, text, _ = await s.call("remove_stream", stream=stream)
                assert not error, text

    asyncio.run(linking())
