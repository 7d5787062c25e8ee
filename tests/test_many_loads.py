"""Many `tatolab run -d` at once: every one is answered and kept, the waiting ones are told their
place, and the control socket answers `streams` meanwhile."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path

from harness import BIN, make_project
from nodes_fixture import TINY_NODES, tiny_stream

AT_ONCE = 30
def ask_streams(path: Path) -> float:
    """Seconds until `streams` is answered on a fresh connection."""
    began = time.monotonic()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(b'{"op": "streams", "args": {}}\n')
        answer = json.loads(sock.makefile("rb").readline())
    assert answer["ok"], answer
    return time.monotonic() - began


def test_thirty_run_d_at_once_are_all_answered_and_kept(runtime, project_venv, tmp_path):
    projects = [make_project(tmp_path / f"p{i}", project_venv,
                             {"stream.py": tiny_stream(f"many{i}"), "nodes/__init__.py": "", "nodes/tiny.py": TINY_NODES})
                for i in range(AT_ONCE)]
    env = dict(runtime.env, TATOLAB_LOADS_AT_ONCE="2")  # the line, whatever this machine's CPUs
    runtime.stop()
    runtime.env = env
    runtime.start()
    waits: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            waits.append(ask_streams(runtime.socket))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        commands = [subprocess.Popen([str(BIN / "tatolab"), "run", "-d"], cwd=p, env=runtime.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in projects]
        results = [(c.wait(timeout=300), *c.communicate()) for c in commands]
    finally:
        done.set()
        poller.join()
    failed = [(i, out, err) for i, (code, out, err) in enumerate(results) if code != 0]
    assert failed == [], failed
    for i, (_, out, _) in enumerate(results):
        assert out == f"many{i} kept (project {projects[i]})\n"
    told = [err for _, _, err in results if "waiting for its turn:" in err]
    assert told, "no request was told its place in line"
    assert all("(the runtime compiles and starts 2 streams at once)" in err for err in told)
    assert sorted(runtime.stream_names()) == sorted(f"many{i}" for i in range(AT_ONCE))
    listing = runtime.cli("streams", check=True).stdout
    assert listing.count(" kept ") == AT_ONCE, listing
    # the socket kept answering while 30 streams compiled and started (generous: the machine is shared)
    assert len(waits) >= 3 and sorted(waits)[len(waits) // 2] < 2.0, waits


def test_the_cli_says_its_place_in_line_and_waits_on_for_the_answer(tmp_path):
    from test_one_request import RecordingRuntime

    project = tmp_path / "p"
    project.mkdir()
    (project / "stream.py").write_text("")
    waiting = {"waiting": True, "place": 3, "in_line": 3, "at_once": 2, "what": "load"}
    fake = RecordingRuntime(tmp_path / "rt", {"load": [
        {"notice": waiting}, {"notice": {**waiting, "place": 1}}, {"notice": {"waiting": False, "place": 0}},
        {"ok": True, "result": {"event": "loaded", "name": "p", "project": str(project), "nodes": 1}},
    ]})
    try:
        result = subprocess.run([str(BIN / "tatolab"), "run", "-d"], cwd=project, env=fake.env, capture_output=True,
                                text=True, timeout=60)
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"p kept (project {project})\n"
    # the first place is said at once; the next ones at most every few seconds
    assert result.stderr.splitlines()[0] == ("waiting for its turn: 3 of 3 in line (the runtime compiles and starts "
                                            "2 streams at once)")
    assert fake.requests[0]["notices"] is True
