"""A project's environment as a new user makes it: `tatolab new` then `uv add`, `tatolab sdk`
on a folder without `.venv` or with another tatolab, and folders that are not projects."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness import BIN, REPO, Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import pipeline_files

import tatolab

pytestmark = pytest.mark.slow

OFFLINE = ["unshare", "-rn"] if shutil.which("unshare") and subprocess.run(
    ["unshare", "-rn", "true"], capture_output=True).returncode == 0 else []


def tatolab_cli(runtime: Runtime, *args: str, cwd: Path | None = None, offline: bool = False) -> subprocess.CompletedProcess:
    command = [*(OFFLINE if offline else []), str(BIN / "tatolab"), *args]
    return subprocess.run(command, env=runtime.env, cwd=cwd, capture_output=True, text=True, timeout=180)


def sdk_version(project: Path) -> str:
    done = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c",
                           "import tatolab, tatolab._compile; print(tatolab.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else f"broken: {done.stderr.strip()}"


def uv_env(base: dict, tmp_path: Path) -> dict:
    """uv reads no pip configuration: give it the index pip uses here (CI's), and pip's CA bundle."""
    env = dict(base, UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_PYTHON_DOWNLOADS="never")
    pip_config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    settings = dict(line.split("=", 1) for line in pip_config.stdout.splitlines() if "=" in line)
    index = os.environ.get("PIP_INDEX_URL") or settings.get("global.index-url", "").strip("'\"")
    cert = os.environ.get("PIP_CERT") or settings.get("global.cert", "").strip("'\"")
    if index:
        env["UV_DEFAULT_INDEX"] = index
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    return env


def run_until(runtime: Runtime, project: Path, ready, what: str) -> str:
    """`tatolab run` attached until ``ready()``, then Ctrl-C; its stdout."""
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(ready, timeout=60, what=what)
    finally:
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=20)
    assert run.returncode in (0, 130), err
    return out


def test_new_then_uv_add_keeps_the_runtimes_sdk_and_the_stream_runs(runtime, tmp_path):
    uv = BIN / "uv"  # the test extra installs uv from the package index, as a user would
    assert uv.exists(), "uv is in the test extra: run scripts/setup"
    project = tmp_path / "my-stream"
    made = tatolab_cli(runtime, "new", str(project))
    assert made.returncode == 0, made.stderr
    [wheel] = (Path(runtime.env["XDG_STATE_HOME"]) / "tatolab" / "sdk").glob(
        f"*/tatolab-{tatolab.__version__}-*.whl")
    assert f'tatolab = {{ path = "{wheel}" }}' in (project / "pyproject.toml").read_text()

    ticker = project / "nodes" / "ticker.py"
    ticker.write_text("import six  # arrives with uv add\n" + ticker.read_text())
    env = uv_env(runtime.env, tmp_path)
    added = subprocess.run([str(uv), "add", "six"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert added.returncode == 0, added.stderr
    lock = (project / "uv.lock").read_text()
    tatolab_entry = next(block for block in lock.split("[[package]]") if block.startswith('\nname = "tatolab"\n'))
    assert f'source = {{ path = "{wheel}" }}' in tatolab_entry, tatolab_entry  # never the index's placeholder
    assert sdk_version(project) == tatolab.__version__

    log = project / ".streamlib" / "logs" / "my_stream.jsonl"
    out = run_until(runtime, project, lambda: any(r["message"] == "tick" for r in read_jsonl(log)), "tick records")
    assert "my_stream running attached (1 node, project" in out


def test_sdk_makes_a_missing_venv_offline_and_the_hint_says_so(runtime, tmp_path):
    project = make_project(tmp_path / "novenv", None, pipeline_files())
    refused = runtime.cli("run", cwd=project)
    assert refused.returncode == 1
    assert f"`tatolab sdk {project}` creates it" in refused.stderr and "uv sync" not in refused.stderr

    made = tatolab_cli(runtime, "sdk", str(project), offline=True)
    assert made.returncode == 0, made.stderr
    assert sdk_version(project) == tatolab.__version__
    run_until(runtime, project, lambda: len(read_jsonl(project / "out.jsonl")) > 5, "bags at the sink")


def test_sdk_replaces_another_tatolab_and_points_uv_at_the_runtimes(runtime, tmp_path):
    project = make_project(tmp_path / "placeholder", None, {
        **pipeline_files(), "pyproject.toml": '[project]\nname = "p"\nversion = "0"\ndependencies = ["tatolab"]\n'})
    venv.EnvBuilder(with_pip=False).create(project / ".venv")  # as uv makes it: no pip
    site = next((project / ".venv" / "lib").glob("python3*/site-packages"))
    (site / "tatolab").mkdir()
    (site / "tatolab" / "__init__.py").write_text('__version__ = "0.0.1"\n')  # the index's placeholder
    refused = runtime.cli("run", cwd=project)
    assert refused.returncode == 1
    assert f"{project}/.venv has an older or another tatolab" in refused.stderr
    assert f"`tatolab sdk {project}` installs this runtime's SDK there" in refused.stderr

    fixed = tatolab_cli(runtime, "sdk", str(project), offline=True)
    assert fixed.returncode == 0, fixed.stderr
    assert sdk_version(project) == tatolab.__version__
    assert "[tool.uv.sources]\n" in (project / "pyproject.toml").read_text()
    assert "tatolab = { path = " in (project / "pyproject.toml").read_text()
    run_until(runtime, project, lambda: len(read_jsonl(project / "out.jsonl")) > 5, "bags at the sink")


@pytest.mark.parametrize("command", ["run", "dev"])
def test_a_folder_without_stream_py_says_what_is_missing(runtime, tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runtime.cli(command, cwd=empty, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: there is no stream.py in {empty}, so there is no stream to load here. "
        f"`tatolab new {empty}` makes a project in this folder, or `--dir` points at a project elsewhere"
    )
    project = make_project(tmp_path / "project", None, pipeline_files())
    inside = project / "nodes"
    result = runtime.cli(command, cwd=inside, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: there is no stream.py in {inside}: it is a folder inside the project {project}. "
        f"Run `tatolab {command}` there, or `tatolab {command} --dir {project}`"
    )
    assert runtime.stream_names() == []


def test_the_readmes_install_line_puts_tatolab_and_tatolabd_on_path(tmp_path):
    line = 'uv tool install "./tatolab[runtime]"'
    assert line in (REPO / "README.md").read_text()
    env = uv_env(dict(os.environ), tmp_path)
    env.update(UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"))
    env.pop("VIRTUAL_ENV", None)
    installed = subprocess.run([str(BIN / "uv"), "tool", "install", f"{REPO}[runtime]"], env=env,
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    for command in ("tatolab", "tatolabd"):
        assert (tmp_path / "bin" / command).exists(), installed.stderr
    version = subprocess.run([str(tmp_path / "bin" / "tatolab"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"tatolab {tatolab.__version__}"


def test_sdk_on_the_tutorials_motion_watcher_installs_numpy_offline_and_it_runs(runtime, tmp_path):
    project = tmp_path / "motion-watcher"
    shutil.copytree(REPO / "examples" / "motion-watcher", project, ignore=shutil.ignore_patterns(".venv", ".streamlib"))
    made = tatolab_cli(runtime, "sdk", str(project), offline=True)
    assert made.returncode == 0, made.stderr
    assert subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", "import numpy"]).returncode == 0

    def detector_read() -> int:
        answer = runtime.cli("graph", "--stream", "motion_watcher")
        if answer.returncode != 0:
            return 0
        nodes = json.loads(answer.stdout)["streams"][0]["nodes"]
        return sum(port["read"] for n in nodes if n["name"] == "detector" for port in n["inputs"])

    run_until(runtime, project, lambda: detector_read() > 5, "frames read by the detector (numpy in its .venv)")
