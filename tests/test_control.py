"""The control plane's pieces without a runtime: operations that describe themselves, refusals
that carry their fix as an operation, and the CLI's rendering of them."""

from __future__ import annotations

from typing import Literal, TypedDict

import pytest

from tatolab._control.words import render
from tatolab._control.errors import ControlError, Fix
from tatolab._control.operations import Events, describe


class Stopped(TypedDict):
    name: str
    kept: bool


async def stop(runtime: object, name: str, count: int | None = None,
               profile: Literal["newest", "ordered"] = "newest") -> Stopped:
    """Unload a stream."""
    raise AssertionError("not called")


async def follow(runtime: object, stream: str) -> Events[Stopped, Stopped]:
    """Follow something."""
    raise AssertionError("not called")


def test_an_operation_lists_its_doc_arguments_and_result_as_json_schema():
    described = describe("stop", stop).schema()
    assert described["description"] == "Unload a stream."
    arguments = described["arguments"]
    assert arguments["required"] == ["name"]
    assert arguments["properties"]["name"] == {"type": "string"}
    assert arguments["properties"]["profile"]["enum"] == ["newest", "ordered"]
    assert arguments["additionalProperties"] is False
    assert described["talks"] is False
    assert described["$defs"]["Stopped"]["properties"]["kept"] == {"type": "boolean"}
    assert describe("follow", follow).schema()["talks"] is True


def test_arguments_are_checked_against_their_types_before_the_operation_runs():
    operation = describe("stop", stop)
    assert operation.check({"name": "cam"}) == {"name": "cam", "count": None, "profile": "newest"}
    for bad, why in (({"nmae": "cam"}, "unknown argument `nmae`"), ({}, "missing argument `name`"),
                     ({"name": "cam", "count": "3"}, "count: expected `int | null`, got `str`"),
                     ({"name": "cam", "profile": "all"}, "profile: invalid enum value 'all'")):
        with pytest.raises(ControlError) as refused:
            operation.check(bad)
        assert refused.value.code == "bad_arguments"
        assert str(refused.value) == f"bad arguments for stop: {why}"


def test_an_operation_without_a_docstring_is_refused_at_registration():
    async def silent(runtime: object) -> None: ...
    with pytest.raises(TypeError, match="silent has no docstring"):
        describe("silent", silent)


def test_a_refusal_travels_as_data_and_the_cli_renders_its_fixes_as_commands_and_flags():
    error = ControlError(
        "a stream named cam is kept from /p (stopped); a kept stream holds its name even while stopped",
        code="name_kept",
        fixes=[Fix("rm", {"name": "cam"}, "remove it first"), Fix("load", {"name": None}, "load this one under another name")],
    )
    wire = error.to_wire()
    assert "tatolab" not in str(wire) and "--" not in str(wire)  # no CLI syntax in what the runtime says
    assert render(ControlError.from_wire(wire)) == (
        "a stream named cam is kept from /p (stopped); a kept stream holds its name even while stopped: "
        "remove it first with `tatolab rm cam`, or load this one under another name with --name"
    )
    assert render(ControlError("count must be 1 or more, not 0", code="bad_value",
                               details={"argument": "count"})) == "--count must be 1 or more, not 0"
    assert render(ControlError("plain")) == "plain"


def test_a_bad_expiry_is_worded_with_its_flag_once():
    from tatolab._runtime.relay.tokens import parse_expiry

    for text, said in (("3y", "--expires '3y' is not a duration; give e.g. 1h, 7d, 30m or never"),
                       ("0h", "--expires '0h' must be longer than nothing; give e.g. 1h, 7d or never")):
        with pytest.raises(ValueError) as refused:
            parse_expiry(text)
        assert "--" not in str(refused.value)  # no CLI syntax in what the runtime says
        assert render(ControlError(str(refused.value), code="bad_value", details={"argument": "expires"})) == said


def test_the_async_client_asks_and_gets_refusals_as_data(tmp_path):
    import asyncio
    import json

    from tatolab._control.client import AsyncClient

    async def scenario() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while line := await reader.readline():
                request = json.loads(line)
                if request["op"] == "ping":
                    writer.write(b'{"ok": true, "result": {"pong": true}}\n')
                else:
                    writer.write(json.dumps({"ok": False, **ControlError(
                        "no stream named cam on this machine", code="unknown_stream",
                        fixes=[Fix("streams", {}, "see its streams")]).to_wire()}).encode() + b"\n")
                await writer.drain()
            writer.close()

        path = tmp_path / "s.sock"
        server = await asyncio.start_unix_server(answer, path=str(path))
        client = await AsyncClient.connect(path)
        try:
            assert await client.request("ping") == {"pong": True}
            with pytest.raises(ControlError) as refused:
                await client.request("stop", name="cam")
            assert refused.value.code == "unknown_stream" and refused.value.fixes == (Fix("streams", {}, "see its streams"),)
        finally:
            await client.close()
            server.close()

    asyncio.run(scenario())


def test_the_runtime_lists_every_operation_with_a_description_and_json_schemas():
    import json

    from tatolab._runtime.ops import OPS, load_all

    load_all()
    listing = {name: operation.schema() for name, operation in OPS.items()}
    json.dumps(listing)  # all of it is JSON
    assert {"operations", "load", "streams", "stop", "start", "rm", "dev", "graph", "tap", "logs", "expose"} <= set(listing)
    for name, described in listing.items():
        assert described["description"], name
        assert described["arguments"]["type"] == "object", name
        assert ("events" in described) is described["talks"], name
    assert listing["logs"]["talks"] and listing["tap"]["talks"] and not listing["streams"]["talks"]
    assert set(listing["logs"]["arguments"]["properties"]) == {"stream", "node", "level", "since", "tail", "follow"}
    streams_answer = listing["streams"]["$defs"]["Listing"]["properties"]
    assert set(streams_answer) == {"streams", "troubled", "unwritten", "recordings", "relay"}


def test_a_stream_or_node_named_in_any_case_is_the_one_the_graph_names():
    """`run -d --name CaseTest` keeps `casetest`: `stop CaseTest`, `logs --stream CaseTest --node Cam`
    and the rest find it, by the one URL-safe rule every name goes through."""
    from tatolab._runtime.ops import OPS, load_all

    load_all()
    assert OPS["stop"].check({"name": "CaseTest"}) == {"name": "casetest"}
    assert OPS["start"].check({"name": "Caméra Avant"}) == {"name": "camera-avant"}
    logs = OPS["logs"].check({"stream": "CaseTest", "node": "Cam"})
    assert (logs["stream"], logs["node"]) == ("casetest", "cam")
    assert OPS["graph"].check({}) == {"stream": None}
    assert OPS["stop"].check({"name": "..."}) == {"name": "..."}  # nothing URL-safe: left to say it names nothing
