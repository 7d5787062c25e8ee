"""The MCP server: each tool call opens the runtime's socket, asks one operation, and hangs up.

With no runtime, every tool answers what the CLI prints then (``error: no runtime is running
...``) and the session stays open; the next call asks again, so it serves once a runtime starts.
A refusal comes back as a tool error in the CLI's words (tatolab/_control/words.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from tatolab import __version__
from tatolab._control.client import AsyncClient, NoRuntime, RequestFailed
from tatolab._control.errors import ControlError
from tatolab._control.words import render
from tatolab._mcp.tools import BY_NAME, TOOLS, Tool, description, input_schema

INSTRUCTIONS = (
    "Tatolab runs live streams on this machine; these tools talk to its runtime (tatolabd) over its "
    "local socket. Addresses of outputs are <stream>/<node>/<port>."
)
TOOL_SLACK_S = 10.0  # beyond a tap's own timeout, before the call gives up on the runtime


class Failed(Exception):
    """A tool call that did not work: its text is what the CLI prints for it."""


def _words(exc: Exception) -> str:
    text = render(exc) if isinstance(exc, ControlError) else str(exc)
    return f"error: {text}"


async def _ask(op: str, args: dict[str, Any]) -> tuple[AsyncClient, Any]:
    try:
        client = await AsyncClient.connect()
    except (NoRuntime, RequestFailed) as exc:
        raise Failed(_words(exc)) from None
    try:
        return client, await client.request(op, **args)
    except (ControlError, RequestFailed) as exc:
        await client.close()
        raise Failed(_words(exc)) from None


async def operations() -> dict[str, dict[str, Any]]:
    """The operations' own descriptions: the runtime's answer, or (none running) this install's."""
    try:
        client, described = await _ask("operations", {})
        await client.close()
    except Failed:
        from tatolab._runtime.ops import OPS, load_all

        load_all()
        described = [OPS[name].schema() for name in OPS]
    return {entry["name"]: entry for entry in described}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    described = await operations()
    return types.ListToolsResult(tools=[
        types.Tool(name=tool.name, description=description(tool, described[tool.op]),
                   input_schema=input_schema(tool, described[tool.op]))
        for tool in TOOLS if tool.op in described
    ])


def _checked(tool: Tool, arguments: dict[str, Any], described: dict[str, Any]) -> dict[str, Any]:
    schema = input_schema(tool, described)
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise Failed(f"error: bad arguments for {tool.name}: {where + ': ' if where else ''}{exc.message}") from None
    full = {name: spec["default"] for name, spec in tool.limits.items() if name not in arguments}
    full.update(arguments)
    full.update(tool.fixed)
    if tool.name == "run_stream" and "project" in full:
        full["project"] = str(Path(full["project"]).expanduser().resolve())
    return full


async def _tap(args: dict[str, Any]) -> dict[str, Any]:
    client, opened = await _ask("tap", args)
    bags: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(args["timeout"] + TOOL_SLACK_S):
            async for event in client.events():
                if event.get("event") == "bag":
                    bags.append({k: event[k] for k in ("n", "ts_ns", "size", "bag") if k in event})
                elif event.get("event") == "end":
                    end = {k: v for k, v in event.items() if k != "event"}
                    return {"address": opened["address"], "bags": bags, "end": end}
    except TimeoutError:
        pass
    finally:
        await client.close()  # hanging up releases the tap's reader record
    raise Failed(f"error: the runtime went away during the tap of {opened['address']} (got {len(bags)} bags)")


async def _logs(args: dict[str, Any]) -> dict[str, Any]:
    client, opened = await _ask("logs", args)
    records: list[Any] = []
    try:
        async for event in client.events():
            if event.get("event") == "line":
                line = event["line"]
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append(line)
            elif event.get("event") == "end":
                break
    finally:
        await client.close()
    return {"stream": opened.get("stream"), "log": opened.get("log"), "records": records}


class Attached:
    """The streams this session runs attached: each holds a connection open (reading its log, which
    `logs` also reads); hanging up when the session ends unloads them."""

    def __init__(self) -> None:
        self.held: list[tuple[AsyncClient, asyncio.Task[None]]] = []

    async def load(self, args: dict[str, Any]) -> Any:
        client, loaded = await _ask("load", args)
        self.held.append((client, asyncio.create_task(self._drain(client))))
        return loaded

    @staticmethod
    async def _drain(client: AsyncClient) -> None:
        async for _ in client.events():
            pass

    async def hang_up(self) -> None:
        for client, reading in self.held:
            reading.cancel()
            await client.close()
        self.held.clear()


ATTACHED = Attached()


async def call(name: str, arguments: dict[str, Any]) -> Any:
    """The result of tool ``name``, or Failed with the CLI's words."""
    tool = BY_NAME.get(name)
    if tool is None:
        raise Failed(f"error: no tool {name!r}; the tools are {', '.join(BY_NAME)}")
    described = (await operations()).get(tool.op)
    if described is None:
        raise Failed(f"error: this runtime has no {tool.op} operation (an older tatolabd?); restart it")
    args = _checked(tool, arguments, described)
    if tool.op == "tap":
        return await _tap(args)
    if tool.op == "logs":
        return await _logs(args)
    if tool.op == "load" and args["mode"] == "attached":
        return await ATTACHED.load(args)
    client, result = await _ask(tool.op, args)
    await client.close()
    return result


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    try:
        result = await call(params.name, params.arguments or {})
    except Failed as exc:
        return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
    text = json.dumps(result, indent=2, default=str)
    structured = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)


def make_server() -> Server[Any]:
    return Server("tatolab", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    server = make_server()
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await ATTACHED.hang_up()


def main() -> int:
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0
