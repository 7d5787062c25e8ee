"""`tatolab dev`: load the stream attached and again after every save (the runtime watches).

If the runtime goes down, dev says so, waits for one to answer again, and loads the
stream again. Ctrl-C (or closing the terminal) hangs up, which unloads the stream.
"""

from __future__ import annotations

import argparse
import signal
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._control.words import from_answer, reason_words
from tatolab._control.errors import ControlError
from tatolab._control.client import Client, NoRuntime, RequestFailed
from tatolab._cli.commands import add
from tatolab._cli.project import Hangup, add_load_arguments, load_request, project_problem
from tatolab._control import protocol
from tatolab._words import counted

NOTHING_LOADED = "no stream is loaded — fix it and save again"
POLL_S = 0.2


class _RuntimeDown(Exception):
    pass


def describe(event: dict[str, Any]) -> str | None:
    """What the terminal shows for one event from the runtime's dev operation."""
    from tatolab import _records

    kind = event.get("event")
    if kind == "log":
        return _records.format_for_terminal(event["record"])
    if kind == "loaded":
        if event.get("reload"):
            since = event.get("timings_ms", {}).get("since_change")
            after = f" {since / 1000:.2f} s after the save" if since is not None else ""
            restarted = event.get("restarted")
            if restarted is not None:  # in place: the stream's log line above says which and why
                return f"reloaded {event['name']} ({len(restarted)} of {_nodes(event['nodes'])} restarted){after}"
            return f"reloaded {event['name']} ({_nodes(event['nodes'])}){after}"
        return (f"{event['name']} running attached ({_nodes(event['nodes'])}, project {event['project']}); "
                "it reloads on every save; Ctrl-C stops it")
    if kind == "change":
        return f"saved {', '.join(event['files'])}; reloading"
    if kind == "failed":
        running = event.get("running")
        then = (f"{running} keeps running the previous version until a save that works" if running
                else NOTHING_LOADED)
        return f"error: {from_answer(event).rstrip()}\n{then}"
    return None


def _nodes(count: int) -> str:
    return counted(count, "node")


def _open_session(load: dict[str, Any]) -> tuple[Client, dict[str, Any]]:
    """Ask the runtime to start dev; raises NoRuntime/_RuntimeDown when it is not there."""
    client = Client()
    problem = project_problem(load, "dev")
    if problem:
        client.close()
        raise RequestFailed(problem)
    try:
        client.sock.sendall(_request(load))
        answer = client.next_message()
    except OSError:
        client.close()
        raise _RuntimeDown() from None
    if answer is None:
        client.close()
        raise _RuntimeDown()
    if not answer.get("ok"):
        client.close()
        raise ControlError.from_wire(answer)
    return client, answer["result"]


def _request(load: dict[str, Any]) -> bytes:
    return protocol.encode({"op": "dev", "args": load})


def _follow(client: Client, first: dict[str, Any]) -> int | None:
    """Print events until the stream ends (an exit code) or the runtime goes away (None)."""
    event: dict[str, Any] | None = first
    name = first.get("name")
    while event is not None:
        if event.get("event") == "loaded":
            name = event["name"]
        if event.get("event") == "ended":
            if event.get("runtime_down"):
                return None
            print(f"{name or 'the stream'} stopped: {reason_words(event)}", flush=True)
            return 0
        text = describe(event)
        if text is not None:
            print(text, flush=True)
        try:
            event = client.next_message()
        except OSError:
            return None
    return None


def _wait_for_runtime(load: dict[str, Any]) -> tuple[Client, dict[str, Any]]:
    while True:
        try:
            return _open_session(load)
        except (NoRuntime, _RuntimeDown):
            time.sleep(POLL_S)


def cmd_dev(args: argparse.Namespace) -> int:
    load = load_request(args)

    def hang_up(*_: Any) -> None:
        raise Hangup()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, hang_up)
    client: Client | None = None
    try:
        try:
            client, first = _open_session(load)
        except _RuntimeDown:
            raise RequestFailed("the runtime closed the connection before answering") from None
        while True:
            code = _follow(client, first)
            client.close()
            client = None
            if code is not None:
                return code
            print("the runtime went down; waiting for it to come back (Ctrl-C stops dev)", flush=True)
            client, first = _wait_for_runtime(load)
            print("the runtime is back; loading the stream again", flush=True)
    except (KeyboardInterrupt, Hangup):
        return 130
    finally:
        if client is not None:
            client.close()  # hanging up is what unloads the stream


def register(commands: Any) -> None:
    dev = add(commands, "dev")
    add_load_arguments(dev)
    dev.set_defaults(func=cmd_dev)
