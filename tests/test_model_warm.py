"""The warm interpreters' messages (tatolab/_model/warm.py): typed both ways, the wire what it was;
a message that does not fit is an error naming it and the fix, and the runtime then starts that
.venv's processes cold instead of waiting on an answer that never comes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tatolab._model.warm import (Exited, Ready, Refused, Spawn, Spawned, Stale, WarmMessageProblem, encode,
                                 read_reply, read_request)
from tatolab._runtime.processes.starter import WarmServer, WarmStarter


def test_each_reply_reads_back_by_its_keys_as_the_json_it_always_was():
    for reply in (Ready(5), Spawned(1, 77), Refused(2, "fork failed"), Stale(3, "x.py changed"), Exited(77, -9)):
        assert read_reply(encode(reply)) == reply
    assert read_reply(json.dumps({"id": 1, "pid": 77}).encode()) == Spawned(1, 77)  # an older interpreter's bytes
    assert json.loads(encode(Exited(77, -9))) == {"exit": 77, "code": -9}
    request = Spawn(id=1, python="/p/.venv/bin/python", module="m", args=["a"], cwd="/p", env={"A": "1"},
                    targets=[0, 1, 2])
    assert read_request(encode(request)) == request


@pytest.mark.parametrize("data, problem", [
    (b'{"id": 1, "pid": "77"}', "Spawned message {\"id\": 1, \"pid\": \"77\"} does not fit: pid: expected `int`, got `str`"),
    (b'{"exit": 77}', "Exited message {\"exit\": 77} does not fit: object missing required field `code`"),
    (b'{"id": 1, "child": 77}', "is none of its replies (it has none of the keys ready, exit, pid, stale, error)"),
    (b"{half", "is not JSON"),
])
def test_a_reply_that_does_not_fit_names_the_message_and_the_fix(data, problem):
    with pytest.raises(WarmMessageProblem) as caught:
        read_reply(data)
    assert problem in str(caught.value)
    assert "`tatolab sdk <project>`" in str(caught.value)


def test_a_request_that_does_not_fit_names_the_field():
    with pytest.raises(WarmMessageProblem, match=r"request .* targets\[1\]: expected `int`, got `str`.*tatolab sdk"):
        read_request(b'{"id": 1, "python": "p", "module": "m", "args": [], "cwd": "/", "env": {}, "targets": [0, "1"]}')


def test_the_runtime_given_a_reply_that_does_not_fit_fails_the_start_with_its_words():
    """The asker gets the problem as its OSError (the starter then starts cold), not a hang."""

    async def go():
        loop = asyncio.get_running_loop()
        server = WarmServer(Path(sys.executable), {})
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        server.sock, server.alive = ours, True
        loop.add_reader(ours.fileno(), server._readable)
        asked = loop.create_future()
        server._pending[1] = asked
        theirs.send(b'{"id": 1, "pid": "77"}')
        try:
            with pytest.raises(OSError) as caught:
                await asyncio.wait_for(asked, 30)
        finally:
            await server.close()
            theirs.close()
        return str(caught.value), server

    problem, server = asyncio.run(go())
    assert "pid: expected `int`, got `str`" in problem and "tatolab sdk" in problem
    assert server.problem == problem and not server.alive


def test_a_starter_whose_interpreter_speaks_otherwise_starts_cold_and_says_why(tmp_path, monkeypatch):
    said: list[tuple[str, str]] = []

    async def garbled(self: WarmServer) -> None:
        self.problem = "a warm interpreter's message {} is none of its replies"
        raise OSError(self.problem)

    monkeypatch.setattr(WarmServer, "open", garbled)
    (tmp_path / "hello.py").write_text("print('hello')\n")

    async def go():
        starter = WarmStarter()
        starter.say = lambda level, message, **fields: said.append((level, message))
        try:
            child = await starter.start(Path(sys.executable), "hello", [], cwd=tmp_path, env=dict(os.environ))
            out, _ = await child.communicate()
            return out
        finally:
            await starter.close()

    assert asyncio.run(go()) == b"hello\n"
    assert said == [("warning", "a warm interpreter's message {} is none of its replies")]


def test_a_warm_interpreter_refuses_a_request_that_does_not_fit_naming_it():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = subprocess.Popen([sys.executable, "-m", "tatolab._host.warm", str(theirs.fileno())],
                              pass_fds=(theirs.fileno(),), stderr=subprocess.PIPE)
    theirs.close()
    try:
        ours.settimeout(60)
        assert "ready" in json.loads(ours.recv(65536))
        ours.send(b'{"id": 5, "python": "p", "module": 3, "args": [], "cwd": "/", "env": {}, "targets": [0]}')
        reply = read_reply(ours.recv(65536))
        assert isinstance(reply, Refused) and reply.id == 5
        assert "cannot read the runtime's request" in reply.error and "module: expected `str`, got `int`" in reply.error
        assert "tatolab sdk" in reply.error
    finally:
        ours.close()  # the runtime hangs up: the interpreter ends
        assert server.wait(timeout=60) == 0
        server.stderr.close()  # type: ignore[union-attr]
