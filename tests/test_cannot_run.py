"""A node whose configuration can never work (``CannotRun``, a file McapSource cannot replay) ends
once, with one line, and stays ``failed`` in `graph` and `streams`: never a crash loop."""

from __future__ import annotations

import json

import pytest

from harness import graph_node, make_project, one_node_files, wait_for

REFUSER = """
from tatolab.stream import CannotRun, node


@node(execution="continuous", interval_ms=50)
class Refuser:
    @node.output()
    def out(self) -> dict: ...

    def setup(self, ctx) -> None:
        raise CannotRun("threshold -3 is below 0; give threshold= a number from 0 to 1")

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"ok": True})
"""

REPLAY = """
from tatolab.stream import McapSource, StreamBuilder, stream


@stream
def replay(stream_builder: StreamBuilder) -> None:
    stream_builder.add(McapSource, name="camera", config={"path": %r})
"""


def _node_log(runtime, stream: str, node: str) -> list[dict]:
    out = runtime.cli("logs", "--stream", stream, "--node", node, "--json", check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_a_node_that_raises_cannot_run_in_setup_fails_once_and_stays_failed(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "refusing", project_venv, one_node_files("refusing", "Refuser", REFUSER))
    done = runtime.cli("run", "-d", cwd=project, check=True)
    reason = "threshold -3 is below 0; give threshold= a number from 0 to 1"
    closing = done.stderr.strip().splitlines()[-1]
    assert closing.startswith("0 of 1 node running; node refuser failed at its start: " + reason), closing
    assert "not called yet" not in closing
    node = wait_for(lambda: (n := graph_node(runtime, "refusing", "refuser")).get("state") == "failed" and n,
                    timeout=60, what="the node to show failed")
    line = f"node refuser cannot run: {reason}. It stays failed until its stream is changed or started again"
    assert node["reason"] == line and node["last_error"] == line
    assert node["restarts"] == 0 and node["pid"] is None
    errors = [r for r in _node_log(runtime, "refusing", "refuser") if r["level"] == "error"]
    assert [r["message"] for r in errors] == [line]  # one line, and no restart's line after it
    assert "traceback" not in (errors[0].get("fields") or {})
    listing = runtime.cli("streams", check=True).stdout
    assert f"refusing/refuser failed: {line}." in listing
    assert "restarted" not in listing
    assert graph_node(runtime, "refusing", "refuser")["restarts"] == 0  # still: it was never started again


@pytest.mark.slow
def test_mcap_source_given_a_file_that_is_not_mcap_fails_once_with_its_line(runtime, project_venv, tmp_path):
    notes = tmp_path / "notes.mcap"
    notes.write_text("not a recording\n")
    project = make_project(tmp_path / "replay", project_venv, {"stream.py": REPLAY % str(notes)})
    done = runtime.cli("run", "-d", cwd=project, check=True)
    closing = done.stderr.strip().splitlines()[-1]
    assert closing.startswith(f"0 of 1 node running; node camera failed at its start: {notes} is not an MCAP file"), \
        closing
    node = wait_for(lambda: (n := graph_node(runtime, "replay", "camera")).get("state") == "failed" and n,
                    timeout=60, what="McapSource to show failed")
    assert node["restarts"] == 0 and f"{notes} is not an MCAP file" in node["reason"]
    errors = [r for r in _node_log(runtime, "replay", "camera") if r["level"] == "error"]
    assert len(errors) == 1 and errors[0]["message"].startswith(f"node camera cannot run: {notes} is not an MCAP")
