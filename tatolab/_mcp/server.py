"""The MCP server: each tool call opens the runtime's socket, asks one operation, and hangs up.

With no runtime, every tool answers what the CLI prints then (``error: no runtime is running
...``) and the session stays open; the next call asks again, so it serves once a runtime starts.
A refusal comes back as a tool error in the CLI's words (tatolab/_control/words.py), its fixes
also as tool calls (tatolab/_mcp/calls.py). Resources (the node catalog, each stream's graph) are
in resources.py, prompts in prompts.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import ListenHandler
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from tatolab import __version__
from tatolab._control.client import AsyncClient, NoRuntime, RequestFailed
from tatolab._control.errors import ControlError, Reason
from tatolab._control.words import render
from tatolab._mcp import images, prompts
from tatolab._mcp.calls import in_words, tool_call, tool_calls
from tatolab._mcp.resources import GRAPH_TEMPLATE, Resources
from tatolab._mcp.tools import BY_NAME, TOOLS, Tool, description, input_schema, output_schema
from tatolab._surfaces.pool import PoolExhausted

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

INSTRUCTIONS = (
    "Tatolab runs live streams on this machine; these tools talk to its runtime (tatolabd) over its "
    "local socket. Addresses of outputs are <stream>/<node>/<port>."
)
TOOL_SLACK_S = 10.0  # beyond a tap's own timeout, before the call gives up on the runtime


class Failed(Exception):
    """A tool call that did not work: its text is what the CLI prints for it; ``calls``, the
    refusal's fixes as tool calls."""

    def __init__(self, text: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(text)
        self.calls = calls or []


def _failed(exc: Exception) -> Failed:
    if isinstance(exc, ControlError):
        return Failed(f"error: {render(exc)}", tool_calls(exc))
    return Failed(f"error: {exc}")


async def _ask(op: str, args: dict[str, Any]) -> tuple[AsyncClient, Any]:
    try:
        client = await AsyncClient.connect()
    except (NoRuntime, RequestFailed) as exc:
        raise _failed(exc) from None
    try:
        return client, await client.request(op, **args)
    except (ControlError, RequestFailed) as exc:
        await client.close()
        raise _failed(exc) from None


async def _answer(op: str, args: dict[str, Any]) -> Any:
    """The answer to one request, the connection closed."""
    client, answer = await _ask(op, args)
    await client.close()
    return answer


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


async def list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    described = await operations()
    return types.ListToolsResult(tools=[
        types.Tool(name=tool.name, description=description(tool, described[tool.op]),
                   input_schema=input_schema(tool, described[tool.op]),
                   output_schema=output_schema(tool, described[tool.op]))
        for tool in TOOLS if tool.op in described
    ])


KINDS = {"object": "a JSON object", "array": "a list", "string": "a string", "integer": "an integer",
         "number": "a number", "boolean": "true or false", "null": "null"}


def _schema_words(exc: jsonschema.ValidationError) -> str:
    """jsonschema's message, but "is not a JSON object or null" for a choice of types."""
    if exc.validator in ("anyOf", "oneOf"):
        types_named = [alt.get("type") for alt in exc.validator_value if isinstance(alt, dict)]
        kinds = [kind for kind in types_named if isinstance(kind, str)]
        if kinds and len(kinds) == len(types_named):
            return f"{json.dumps(exc.instance)} is not {' or '.join(KINDS.get(k, k) for k in kinds)}"
    return exc.message


def _takes(schema: dict[str, Any]) -> str:
    """stream, name, node_class (required) and config"""
    required = schema.get("required", [])
    optional = [name for name in schema.get("properties", {}) if name not in required]
    shown = ", ".join(required) + (" (required)" if required else "")
    return " and ".join(part for part in (shown, ", ".join(optional)) if part) or "no arguments"


def _checked(tool: Tool, arguments: dict[str, Any], described: dict[str, Any]) -> dict[str, Any]:
    schema = input_schema(tool, described)
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise Failed(f"error: bad arguments for {tool.name}: {where + ': ' if where else ''}{_schema_words(exc)}; "
                     f"{tool.name} takes {_takes(schema)}") from None
    full = {name: spec["default"] for name, spec in tool.limits.items() if name not in arguments}
    full.update(arguments)
    full = tool.op_args(full)
    full.update(tool.fixed)
    if tool.name == "run_stream" and "project" in full:
        full["project"] = str(Path(full["project"]).expanduser().resolve())
    if tool.name == "record_start" and "out" in full:
        full["out"] = str(Path(full["out"]).expanduser().absolute())
    return full


async def _tap(args: dict[str, Any]) -> dict[str, Any]:
    client, opened = await _ask("tap", args)
    bags: list[dict[str, Any]] = []

    async def read() -> dict[str, Any] | None:
        async for event in client.events():
            if event.get("event") == "bag":
                bags.append({k: event[k] for k in ("n", "ts_ns", "size", "bag") if k in event})
            elif event.get("event") == "end":
                end = {k: v for k, v in event.items() if k != "event"}
                return {"address": opened["address"], "bags": bags, "end": end}
        return None

    try:  # (wait_for, not asyncio.timeout: Python 3.10 has no asyncio.timeout)
        answer = await asyncio.wait_for(read(), args["timeout"] + TOOL_SLACK_S)
        if answer is not None:
            return answer
    except asyncio.TimeoutError:  # (TimeoutError itself only from 3.11)
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


async def _exchange(args: dict[str, Any]) -> list[dict[str, Any]]:
    frames = args.pop("frames")
    if args.get("surface_id") is None and args.get("address") is None:
        raise Failed("error: exchange needs `address` (a video output, <stream>/<node>/<port>) or `surface_id`")
    if args.get("surface_id") is not None:
        args = {"surface_id": args["surface_id"]}
    client, opened = await _ask("exchange", {**args, "count": None})
    try:
        read = images.by_id(client, opened) if "surface_id" in args else \
            images.from_output(client, opened, frames, args["timeout"])
        return await asyncio.wait_for(read, args.get("timeout", 0) + TOOL_SLACK_S)
    except images.NoFrame as exc:
        raise Failed(str(exc)) from None
    except PoolExhausted as exc:  # no place left in the surface pool for this process: say so, with the fix
        raise Failed(f"error: exchange cannot read frames: {exc}") from None
    except asyncio.TimeoutError:
        raise Failed(f"error: the runtime went away during the exchange of {opened.get('address')}") from None
    finally:
        await client.close()  # hanging up releases the tap's reader record


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
    if tool.op == "exchange":
        return await _exchange(args)
    if tool.op == "logs":
        return await _logs(args)
    if tool.op == "load" and args["mode"] == "attached":
        return await ATTACHED.load(args)
    client, result = await _ask(tool.op, args)
    await client.close()
    return result


def error_result(exc: Failed) -> types.CallToolResult:
    """The CLI's words first, word for word; then the fixes as tool calls, when there are any."""
    content: list[types.ContentBlock] = [types.TextContent(text=str(exc))]
    if exc.calls:
        content.append(types.TextContent(text=in_words(exc.calls)))
    return types.CallToolResult(content=content, is_error=True,
                                structured_content={"error": str(exc), "fixes": exc.calls})


def images_result(frames: list[dict[str, Any]]) -> types.CallToolResult:
    content: list[Any] = []
    for frame in frames:
        shown = {k: v for k, v in frame.items() if k != "png_base64"}
        content.append(types.TextContent(text=json.dumps(shown)))
        content.append(types.ImageContent(data=frame["png_base64"], mime_type="image/png"))
    return types.CallToolResult(content=content)


async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
    try:
        result = await call(params.name, params.arguments or {})
    except Failed as exc:
        return error_result(exc)
    if params.name == "exchange":
        return images_result(result)
    if isinstance(result, dict) and isinstance(result.get("why"), dict) and result["why"].get("fixes"):
        # a link that waits (connect): what would wire it, as tool calls
        result["fix_calls"] = [c for c in map(tool_call, Reason.from_wire(result["why"]).fixes) if c is not None]
    text = json.dumps(result, indent=2, default=str)
    structured = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)


RESOURCES = Resources(_answer)
LISTEN = ListenHandler(RESOURCES.bus)


def _handshake_era(ctx: ServerRequestContext) -> None:
    """On a handshake-era session, changes are told as plain notifications (2026-07-28: on listen streams)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        RESOURCES.listening(ctx.session)


async def listen(ctx: ServerRequestContext, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
    """A 2026-07-28 listen stream: watch what it asks for while it is open."""
    wanted = params.notifications
    uris = [str(uri) for uri in wanted.resource_subscriptions or ()]
    await RESOURCES.hold(uris, list_changed=bool(wanted.resources_list_changed))
    try:
        return await LISTEN(ctx, params)
    finally:
        RESOURCES.release(uris)


def _no_resource(exc: Exception) -> MCPError:
    return MCPError(INVALID_PARAMS, str(exc))


async def list_resources(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    _handshake_era(ctx)
    return types.ListResourcesResult(resources=await RESOURCES.list())


async def list_resource_templates(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
        uri_template=GRAPH_TEMPLATE, name="stream graph", mime_type="application/json",
        description="The live graph of one stream, as the `graph` tool returns it.")])


async def read_resource(ctx: ServerRequestContext, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    _handshake_era(ctx)
    uri = str(params.uri)
    try:
        data = await RESOURCES.read(uri)
    except (Failed, LookupError) as exc:
        raise _no_resource(exc) from None
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=uri, mime_type="application/json", text=json.dumps(data, indent=2, default=str))])


async def subscribe(ctx: ServerRequestContext, params: types.SubscribeRequestParams) -> types.EmptyResult:
    _handshake_era(ctx)
    try:
        await RESOURCES.subscribe(str(params.uri))
    except LookupError as exc:
        raise _no_resource(exc) from None
    return types.EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    RESOURCES.unsubscribe(str(params.uri))
    return types.EmptyResult()


async def list_prompts(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[prompt.listed() for prompt in prompts.PROMPTS])


async def get_prompt(ctx: ServerRequestContext, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    prompt = prompts.BY_NAME.get(params.name)
    if prompt is None:
        raise MCPError(INVALID_PARAMS, f"no prompt {params.name!r}; the prompts are {', '.join(prompts.BY_NAME)}")
    return types.GetPromptResult(description=prompt.description, messages=[types.PromptMessage(
        role="user", content=types.TextContent(text=prompt.text(params.arguments or {})))])


def make_server() -> Server[Any]:
    return Server("tatolab", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_list_resource_templates=list_resource_templates,
                  on_read_resource=read_resource, on_subscribe_resource=subscribe,
                  on_unsubscribe_resource=unsubscribe, on_subscriptions_listen=listen, on_list_prompts=list_prompts, on_get_prompt=get_prompt)


async def serve() -> None:
    server = make_server()
    watching = asyncio.create_task(RESOURCES.watch())
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream,
                             server.create_initialization_options(NotificationOptions(resources_changed=True)))
    finally:
        watching.cancel()
        LISTEN.close()
        await ATTACHED.hang_up()


def main() -> int:
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return 130
    return 0
