"""execution="thread" in a real runtime: a source's run(ctx) on the node host's thread stops cleanly
on `tatolab stop`, and what it raises ends the node once, as a node failure."""

from __future__ import annotations

import pytest

from harness import graph_node, make_project, one_node_files, read_jsonl, wait_for

TICKER = """
from pathlib import Path

from tatolab.stream import node


@node(execution="thread")
class Ticker:
    @node.output()
    def ticks(self) -> dict: ...

    def __init__(self) -> None:
        self.returned = False

    def run(self, ctx) -> None:
        first = not Path("started").exists()
        Path("started").touch()
        n = 0
        while not ctx.stopping.is_set():
            ctx.outputs.write("ticks", {"n": n})
            ctx.report(ticks=n)
            n += 1
            if first and n == 3 and Path("fail").exists():
                raise ValueError("the sensor broke")
            ctx.stopping.wait(0.01)
        self.returned = True

    def teardown(self, ctx) -> None:
        ctx.log.info("ticker torn down", returned=self.returned)
"""


def _log(project) -> list[dict]:
    return [r for path in sorted((project / ".streamlib" / "logs").glob("*.jsonl")) for r in read_jsonl(path)]


@pytest.mark.slow
def test_a_thread_source_runs_until_the_stop_and_returns_before_teardown(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "ticking", project_venv, one_node_files("ticking", "Ticker", TICKER))
    runtime.cli("run", "-d", cwd=project, check=True)
    wait_for(lambda: graph_node(runtime, "ticking", "ticker").get("metrics", {}).get("ticks", 0) >= 3,
             timeout=60, what="three ticks")
    runtime.cli("stop", "ticking", cwd=project, check=True)
    torn = wait_for(lambda: [r for r in _log(project) if r["message"] == "ticker torn down"], timeout=60,
                    what="the teardown's line")
    assert torn[0]["fields"]["returned"] is True  # run() saw ctx.stopping and returned before teardown
    assert [r for r in _log(project) if r["level"] == "error" and r.get("node") == "ticker"] == []


@pytest.mark.slow
def test_what_a_thread_source_raises_ends_the_node_once_as_a_failure(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "failing", project_venv, one_node_files("failing", "Ticker", TICKER))
    (project / "fail").touch()  # the first run() raises at its third tick; the restarted one goes on
    runtime.cli("run", "-d", cwd=project)
    node = wait_for(lambda: (n := graph_node(runtime, "failing", "ticker")).get("restarts", 0) >= 1
                    and n.get("metrics", {}).get("ticks", 0) >= 3 and n, timeout=60, what="the restarted ticker")
    assert "ValueError: the sensor broke" in (node["last_error"] or "")
    errors = [r for r in _log(project) if r["level"] == "error" and "the sensor broke" in r["message"]]
    assert len(errors) == 1, errors  # said once, by the node host, with its traceback
    assert errors[0]["message"] == "node ticker raised ValueError: the sensor broke"
    assert "in run" in errors[0]["fields"]["traceback"]
    torn = [r for r in _log(project) if r["message"] == "ticker torn down"]
    assert torn and torn[0]["fields"]["returned"] is False  # the failed run's teardown ran too
    runtime.cli("stop", "failing", cwd=project, check=True)
