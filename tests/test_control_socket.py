"""The control socket answers bad requests with an error and keeps serving everyone else."""

from __future__ import annotations

import json
import socket

import pytest

from harness import Runtime


def _talk(runtime: Runtime, payload: bytes) -> list[dict]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(runtime.socket))
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@pytest.mark.slow
def test_malformed_requests_get_errors_and_the_runtime_keeps_serving(runtime):
    answers = _talk(runtime, b"this is not json\n[1, 2]\n{\"op\": \"fly\"}\n{\"op\": \"stop\", \"args\": {}}\n"
                             b"{\"op\": \"streams\", \"args\": \"nope\"}\n{\"op\": \"stop\", \"args\": {\"nmae\": 1}}\n"
                             b"{\"op\": \"streams\"}\n")
    assert [a["ok"] for a in answers] == [False, False, False, False, False, False, True]
    assert "not a JSON object" in answers[0]["error"]
    assert "must be a JSON object" in answers[1]["error"]
    assert "unknown op 'fly'" in answers[2]["error"] and "streams" in answers[2]["error"]
    assert "bad arguments for stop" in answers[3]["error"]
    assert "args must be a JSON object" in answers[4]["error"]
    assert "bad arguments for stop" in answers[5]["error"]
    assert answers[6]["result"] == {"streams": [], "troubled": [], "unwritten": [], "relay": None, "recordings": []}
    # a client that sends half a line and vanishes harms nobody
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(runtime.socket))
        sock.sendall(b'{"op": "str')
    assert runtime.cli("streams").returncode == 0


def test_an_overlong_or_overnested_request_is_refused_and_the_connection_keeps_serving(runtime):
    too_long = b'{"op": "ping", "pad": "' + b"x" * (17 * 1024 * 1024) + b'"}\n'
    answers = _talk(runtime, too_long + b"[" * 100_000 + b"\n" + b'{"op": "ping"}\n')
    assert [a["ok"] for a in answers] == [False, False, True]
    assert "a request longer than 16 MiB was refused" in answers[0]["error"]
    assert answers[1]["error"] == "not a request: JSON nested too deeply to read"
    assert answers[2]["result"] == {"pong": True}
