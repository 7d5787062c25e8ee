"""`tatolab new`: a project and its .venv, offline, ready for `tatolab dev`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from harness import BIN, read_jsonl, wait_for

import tatolab
from tatolab._cli.new import function_name
from tatolab._cli.wheels import _wheel_tags


def new(runtime_env: dict, *args: str, cwd=None) -> subprocess.CompletedProcess:
    command = [str(BIN / "tatolab"), "new", *args]
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"]).returncode == 0:
        command = ["unshare", "-rn", *command]  # no network at all: pip must not need an index
    return subprocess.run(command, env=runtime_env, cwd=cwd, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("flag, record, nodes", [((), "tick", "1 node"), (("--test-pattern",), "frame", "2 nodes")])
def test_new_then_dev_runs_the_project(runtime, tmp_path, flag, record, nodes):
    project = tmp_path / "my-stream"
    made = new(runtime.env, str(project), *flag)
    assert made.returncode == 0, made.stderr
    assert {p.name for p in project.iterdir()} == {"stream.py", "nodes", "pyproject.toml", ".gitignore", ".venv"}
    assert 'dependencies = ["tatolab>=' in (project / "pyproject.toml").read_text()
    version = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", "import tatolab; print(tatolab.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == tatolab.__version__

    dev = runtime.popen_cli("dev", cwd=project)
    log = project / ".streamlib" / "logs" / "my_stream.jsonl"
    try:
        found = wait_for(lambda: [r for r in read_jsonl(log) if r["message"] == record], timeout=30,
                         what=f"{record} records")
        if flag:  # the test pattern's frames, read with numpy (installed offline beside the SDK)
            assert found[0]["fields"]["width"] == 640 and found[0]["fields"]["brightness"] > 0, found[0]
            assert '"numpy"' in (project / "pyproject.toml").read_text()
    finally:
        dev.send_signal(signal.SIGINT)
        out, err = dev.communicate(timeout=20)
    assert f"my_stream running attached ({nodes}" in out, err
    wait_for(lambda: runtime.stream_names() == [], what="the stream to unload")


def test_new_refuses_to_overwrite(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "stream.py").write_text("# mine\n")
    refused = new(dict(os.environ), str(project))
    assert refused.returncode == 1
    assert "already has stream.py" in refused.stderr and "never overwrites" in refused.stderr
    assert (project / "stream.py").read_text() == "# mine\n"
    assert [p.name for p in project.iterdir()] == ["stream.py"]


def test_stream_function_names_from_folder_names():
    assert function_name("motion-watcher") == "motion_watcher"
    assert function_name("Caméra Avant") == "camera_avant"
    assert function_name("2024") == "stream_2024"
    assert function_name("class") == "stream_class"


def test_wheel_tags_from_an_installed_wheel():
    text = "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_17_x86_64\nTag: cp311-cp311-manylinux2014_x86_64\n"
    assert _wheel_tags(text) == "cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64"
    assert _wheel_tags("Wheel-Version: 1.0\n") == "py3-none-any"
