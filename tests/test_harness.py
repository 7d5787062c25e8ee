"""The test harness itself: a test that fails half-way still ends what it started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from harness import REPO

INNER = '''
import json, os, sys
from pathlib import Path

from harness import Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import pipeline_files


def test_fails_with_a_runtime_a_stream_and_dev_going(runtime, tmp_path):
    project = make_project(tmp_path / "p", Path(sys.prefix), pipeline_files())
    dev = runtime.popen_cli("dev", cwd=project)  # dev outlives its runtime: it waits for the next one
    wait_for(lambda: read_jsonl(project / "out.jsonl"), timeout=60, what="bags")
    other = Runtime(tmp_path / "other").start()  # one made without the fixture, too
    pids = [runtime.process.pid, dev.pid, other.process.pid, *runtime.node_pids()]
    Path(os.environ["PIDS_FILE"]).write_text(json.dumps(pids))
    assert False, "a test that fails half-way"
'''


@pytest.mark.slow
def test_a_failed_test_leaves_no_runtime_dev_command_or_node_running(tmp_path: Path):
    inner = tmp_path / "inner"
    inner.mkdir()
    for helper in (REPO / "tests").glob("*.py"):
        if not helper.name.startswith("test_"):
            shutil.copy(helper, inner / helper.name)  # conftest.py and the modules it uses
    (inner / "test_inner.py").write_text(INNER)
    pids_file = tmp_path / "pids.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(inner), str(inner)],
        cwd=inner, env={**os.environ, "PIDS_FILE": str(pids_file)},
        capture_output=True, text=True, timeout=170,
    )
    assert done.returncode == 1 and "a test that fails half-way" in done.stdout, done.stdout + done.stderr
    pids = json.loads(pids_file.read_text())
    assert len(pids) >= 6  # two runtimes, the dev command, and the stream's three nodes

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    assert [pid for pid in pids if alive(pid)] == []
