"""scripts/install and scripts/uninstall: the CLI installed as a tool, the runtime as a systemd user
service, and back, against stand-ins for uv, pipx and systemctl that record what they were asked
(as tests/test_service.py does for systemctl): no real package index, user manager or login needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness import BIN
from test_service import NO_MANAGER, REACHABLE

REPO = Path(__file__).resolve().parent.parent
# installs by linking this checkout's tatolab and tatolabd into the tool's bin folder
TOOL = """#!/bin/sh
echo "$(basename "$0") $@" >> "$CALLS"
case "$(basename "$0") $1 $2" in
  "uv tool install"|"pipx install --force") mkdir -p "$TOOL_BIN"; ln -sf "$REAL_BIN/tatolab" "$REAL_BIN/tatolabd" "$TOOL_BIN/" ;;
  "uv tool dir") echo "$TOOL_BIN" ;;
  "pipx environment --value") echo "$TOOL_BIN" ;;
  "uv tool list") [ -e "$TOOL_BIN/tatolab" ] && echo "tatolab v0.1.0" ;;
  "pipx list --short") [ -e "$TOOL_BIN/tatolab" ] && echo "tatolab 0.1.0" ;;
  "uv tool uninstall"|"pipx uninstall tatolab") rm -f "$TOOL_BIN/tatolab" "$TOOL_BIN/tatolabd" ;;
esac
exit 0
"""


@pytest.fixture
def installer_env(tmp_path: Path):
    def make(tool: str, systemctl: str) -> dict:
        shims = tmp_path / "shims"
        shims.mkdir()
        for name, text in ((tool, TOOL), ("systemctl", systemctl)):
            (shims / name).write_text(text)
            (shims / name).chmod(0o755)
        return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
                "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path / "run"),
                "PATH": f"{shims}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls"),
                "SYSTEMCTL_CALLS": str(tmp_path / "calls"), "TOOL_BIN": str(tmp_path / "home" / ".local" / "bin"),
                "REAL_BIN": str(BIN), "LANG": os.environ.get("LANG", "C.UTF-8")}
    return make


def script(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts" / name), *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("tool", ["uv", "pipx"])
def test_install_from_a_clone_installs_the_tool_and_starts_the_service_and_uninstall_undoes_it(installer_env,
                                                                                                tmp_path, tool):
    env = installer_env(tool, REACHABLE)
    installed = script("install", env)
    assert installed.returncode == 0, installed.stderr
    calls = Path(env["CALLS"]).read_text().splitlines()
    assert f"{tool} {'tool install --force' if tool == 'uv' else 'install --force'} {REPO}[runtime]" in calls
    assert "--user restart tatolabd.service" in calls  # service install --now started it
    unit = tmp_path / "config" / "systemd" / "user" / "tatolabd.service"
    assert (unit.parent / "default.target.wants" / "tatolabd.service").resolve() == unit.resolve()
    tool_bin = env["TOOL_BIN"]
    out = installed.stdout
    assert f"Done. What it did: installed tatolab and tatolabd in {tool_bin}; wrote, enabled and started the " \
           "systemd user service tatolabd." in out
    assert f"{tool_bin} is not on PATH" in out
    undo = "uv tool uninstall tatolab" if tool == "uv" else "pipx uninstall tatolab"
    assert f"Undo it: scripts/uninstall (from a clone), which runs: {tool_bin}/tatolab service uninstall && {undo}" \
        in out

    removed = script("uninstall", env)
    assert removed.returncode == 0, removed.stderr
    assert not unit.exists() and not (unit.parent / "default.target.wants").exists()
    assert undo.replace("tatolab", "").strip() in " ".join(Path(env["CALLS"]).read_text().splitlines())
    assert not Path(tool_bin, "tatolab").exists()
    assert f"Kept streams' records and the runtime's log stay in {tmp_path / 'state' / 'tatolab'}" in removed.stdout


def test_install_without_systemd_says_how_to_run_tatolabd_instead(installer_env, tmp_path):
    env = installer_env("uv", NO_MANAGER)
    installed = script("install", env, "git+https://example.invalid/tatolab.git")
    assert installed.returncode == 0, installed.stderr
    assert "uv tool install --force tatolab[runtime] @ git+https://example.invalid/tatolab.git" in \
        Path(env["CALLS"]).read_text().splitlines()
    assert "no systemd user manager answers here, so nothing starts the runtime for you." in installed.stdout
    assert f"     {env['TOOL_BIN']}/tatolabd\n" in installed.stdout
    assert not (tmp_path / "config" / "systemd").exists()
    assert "Undo it: scripts/uninstall (from a clone), which runs: uv tool uninstall tatolab" in installed.stdout


@pytest.mark.slow
def test_uninstall_leaves_the_tool_while_a_tatolabd_runs_and_says_its_pid(installer_env, tmp_path):
    from harness import Runtime

    env = installer_env("uv", REACHABLE)
    assert script("install", env).returncode == 0
    runtime = Runtime(tmp_path, Path(env["XDG_RUNTIME_DIR"]))  # the same socket folder as the installer's environment
    runtime.start()
    try:
        assert runtime.process is not None
        refused = script("uninstall", env)
        assert refused.returncode == 1
        assert (f"tatolabd is running (pid {runtime.process.pid}), started from this tool: stop it first "
                f"(Ctrl-C in its terminal, or `kill {runtime.process.pid}`), then run scripts/uninstall again") \
            in refused.stderr
        assert Path(env["TOOL_BIN"], "tatolab").exists()  # the tool stays under the running runtime
    finally:
        runtime.stop()
    removed = script("uninstall", env)
    assert removed.returncode == 0, removed.stderr
    assert not Path(env["TOOL_BIN"], "tatolab").exists()
