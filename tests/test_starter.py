"""The process starter, without a runtime: a warm child behaves like ``python -m`` started cold."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tatolab._runtime.starter import ColdStarter, WarmStarter, start_vars

PYTHON = Path(sys.executable)
SHOW = "import json, os, sys; print(json.dumps({'cwd': os.getcwd(), 'var': os.environ.get('V'), 'path0': sys.path[0]}))"


async def wait_until(condition, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("kind", [WarmStarter, ColdStarter])
def test_a_child_gets_its_folder_environment_and_pipes_and_its_exit_code(kind, tmp_path):
    (tmp_path / "shower.py").write_text(SHOW + "\nraise SystemExit(int(sys.stdin.read()))\n")

    async def go():
        starter = kind()
        try:
            child = await starter.start(PYTHON, "shower", [], cwd=tmp_path, env=dict(os.environ, V="x"))
            child.stdin.write(b"7")
            child.stdin.close()
            out, err = await child.communicate()
            return child.returncode, json.loads(out), err, starter
        finally:
            await starter.close()

    code, seen, err, starter = run(go())
    assert code == 7, err
    assert seen == {"cwd": str(tmp_path), "var": "x", "path0": str(tmp_path)}


def test_a_warm_child_killed_reports_the_signal_and_its_sibling_lives_on(tmp_path):
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(60)\n")

    async def go():
        starter = WarmStarter()
        try:
            one = await starter.start(PYTHON, "sleeper", [], cwd=tmp_path, env=dict(os.environ))
            two = await starter.start(PYTHON, "sleeper", [], cwd=tmp_path, env=dict(os.environ))
            (server,) = starter.servers.values()
            for child in (one, two):  # the child makes its session first thing; the reply may come first
                await wait_until(lambda: os.getsid(child.pid) == child.pid)
            one.kill()
            assert await asyncio.wait_for(one.wait(), 10) == -signal.SIGKILL
            assert two.returncode is None
            one.kill()  # reaped already: signals nobody (the pid may be someone else's by now)
            two.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(two.wait(), 10) == -signal.SIGTERM
            return server
        finally:
            await starter.close()

    server = run(go())
    assert not server.alive and server.process.returncode is not None


def test_interpreters_are_shared_by_venv_and_start_time_variables_only():
    env = {"PATH": "/bin", "HOME": "/h", "PYTHONPATH": "/x", "LC_ALL": "C", "CAMERA": "/dev/video2", "LANG": "C"}
    assert start_vars(env) == {"HOME": "/h", "PYTHONPATH": "/x", "LC_ALL": "C", "LANG": "C"}


def test_an_install_into_the_venv_replaces_the_warm_interpreter(tmp_path):
    """A package installed after the interpreter started (an editable one adds a .pth file, read
    only at start) is seen by the next child, as by a cold start."""
    venv_dir = tmp_path / "venv"
    import venv

    venv.EnvBuilder(system_site_packages=False, symlinks=True).create(venv_dir)
    site_packages = next((venv_dir / "lib").glob("python*/site-packages"))
    # the interpreter needs tatolab to be warm: point it at this checkout, as an editable install would
    (site_packages / "tatolab-checkout.pth").write_text(str(Path(__file__).resolve().parent.parent) + "\n")
    import msgspec

    (site_packages / "_msgspec.pth").write_text(str(Path(msgspec.__file__).resolve().parent.parent) + "\n")
    lib = tmp_path / "libsrc"
    lib.mkdir()
    (lib / "mylib.py").write_text("WHERE = 'mylib'\n")
    (tmp_path / "show.py").write_text("import mylib\nprint(mylib.WHERE)\n")
    python = venv_dir / "bin" / "python"

    async def go():
        starter = WarmStarter()
        try:
            first = await starter.start(python, "show", [], cwd=tmp_path, env=dict(os.environ), stdin=False)
            _, err = await first.communicate()
            assert b"No module named 'mylib'" in err
            (site_packages / "mylib.pth").write_text(str(lib) + "\n")  # `pip install -e mylib`, in effect
            second = await starter.start(python, "show", [], cwd=tmp_path, env=dict(os.environ), stdin=False)
            out, err = await second.communicate()
            return out, err, len(starter.servers)
        finally:
            await starter.close()

    out, err, servers = run(go())
    assert out == b"mylib\n", err
    assert servers == 1


@pytest.mark.parametrize("kind", [WarmStarter, ColdStarter])
def test_python_c_runs_code_with_its_arguments_as_a_cold_python_c_would(kind, tmp_path):
    code = "import json, sys; print(json.dumps([sys.path[0], sys.argv, __name__, sys.stdin.read()]))"

    async def go():
        starter = kind()
        try:
            child = await starter.start(PYTHON, "-c", [code, "a", "b"], cwd=tmp_path, env=dict(os.environ))
            out, err = await child.communicate(b"given")
            return child.returncode, out, err
        finally:
            await starter.close()

    code_, out, err = run(go())
    assert code_ == 0, err
    assert json.loads(out) == ["", ["-c", "a", "b"], "__main__", "given"]


def test_a_warm_child_that_ends_before_its_start_is_registered_is_still_seen_to_end(tmp_path, monkeypatch):
    """On a busy runtime a compile can end before spawn() resumes after the warm interpreter's
    answer: its exit must still be seen (it was dropped, and `run -d` hung until the CLI gave up)."""
    from tatolab._runtime import starter as starter_module

    real_reader = starter_module._reader
    servers: list = []

    async def late_reader(fd: int, limit: int):
        # hold spawn() back until the warm interpreter has told of the child's exit
        await wait_until(lambda: any(code is not None for s in servers for code in s._unclaimed.values()))
        return await real_reader(fd, limit)

    async def go():
        starter = WarmStarter()
        try:
            first = await starter.start(PYTHON, "-c", ["pass"], cwd=tmp_path, env=dict(os.environ))
            await asyncio.wait_for(first.wait(), 10)
            servers.extend(starter.servers.values())
            monkeypatch.setattr(starter_module, "_reader", late_reader)
            child = await starter.start(PYTHON, "-c", ["raise SystemExit(3)"], cwd=tmp_path, env=dict(os.environ))
            out, err = await asyncio.wait_for(child.communicate(), 10)
            return child.returncode, err
        finally:
            await starter.close()

    code, err = run(go())
    assert code == 3, err
