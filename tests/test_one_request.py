"""`tatolab streams` and `tatolab logs` are one request each: the runtime assembles the answer.

A recording socket stands where the runtime's would be, answers each request with a canned
result, and counts what the CLI asked.
"""

from __future__ import annotations

import json
import subprocess
import threading

from harness import BIN, listen_as_runtime


class RecordingRuntime:
    def __init__(self, root, answers: dict[str, list[dict]]) -> None:
        self.env, self.listener = listen_as_runtime(root)
        self.answers = answers  # op -> the lines to send back
        self.requests: list[dict] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as lines:
                for line in lines:
                    request = json.loads(line)
                    self.requests.append(request)
                    for answer in self.answers[request["op"]]:
                        conn.sendall((json.dumps(answer) + "\n").encode())
                    break  # one request per connection; the CLI's next one would need another

    def close(self) -> None:
        self.listener.close()


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tatolab"), *args], env=env, capture_output=True, text=True, timeout=60)


def test_streams_is_one_request_with_its_troubled_nodes(tmp_path):
    listing = {"streams": [{"name": "cam", "state": "attached", "nodes": 2, "project": "/p"}],
               "troubled": [{"stream": "cam", "name": "det", "state": "crashed", "restarts": 3,
                             "last_error": "boom", "hung": False}],
               "unwritten": [{"path": "/p/.streamlib/logs/cam.jsonl", "error": "No space left on device", "lost": 2,
                              "failing": True}]}
    fake = RecordingRuntime(tmp_path, {"streams": [{"ok": True, "result": listing}]})
    try:
        result = cli(fake.env, "streams")
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert [r["op"] for r in fake.requests] == ["streams"]
    assert "cam" in result.stdout.splitlines()[1]
    assert ("cam/det crashed, restarted 3 times; last error: boom. "
            "`tatolab logs --stream cam --node det` shows more.") in result.stdout
    assert "the runtime cannot write /p/.streamlib/logs/cam.jsonl: No space left on device" in result.stdout


def test_logs_is_one_request_and_prints_what_the_runtime_read(tmp_path):
    record = {"time": "2025-05-01T12:00:00+00:00", "level": "info", "stream": "cam", "node": "det", "message": "hi"}
    fake = RecordingRuntime(tmp_path, {"logs": [
        {"ok": True, "result": {"event": "reading", "stream": "cam", "log": "/p/.streamlib/logs/cam.jsonl"}},
        {"event": "line", "line": json.dumps(record)},
        {"event": "end"},
    ]})
    try:
        result = cli(fake.env, "logs", "--stream", "cam", "--level", "info", "--json")
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert fake.requests == [{"op": "logs", "args": {"stream": "cam", "node": None, "level": "info", "since": None,
                                                      "tail": None, "follow": False}, "notices": True}]
    assert json.loads(result.stdout) == record


def test_a_refusal_is_rendered_with_its_fix_as_a_command(tmp_path):
    refusal = {"ok": False, "code": "name_loaded", "error": "a stream named cam is already loaded from /p (attached)",
               "fixes": [{"op": "stop", "args": {"name": "cam"}, "does": "stop it"},
                         {"op": "load", "args": {"name": None}, "does": "load this one under another name"}]}
    fake = RecordingRuntime(tmp_path, {"stop": [refusal]})
    try:
        result = cli(fake.env, "stop", "cam")
    finally:
        fake.close()
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: a stream named cam is already loaded from /p (attached); "
                                     "stop it with `tatolab stop cam`, or load this one under another name with --name")
