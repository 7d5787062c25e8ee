"""`tatolab service install|uninstall`, against a stand-in `systemctl` that answers as a user
manager would, or fails as it does where none runs (a container, `su` without a login)."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import BIN

REACHABLE = """#!/bin/sh
echo "$@" >> "$SYSTEMCTL_CALLS"
exit 0
"""
NO_MANAGER = """#!/bin/sh
echo "$@" >> "$SYSTEMCTL_CALLS"
echo "Failed to connect to bus: No medium found" >&2
exit 1
"""


@pytest.fixture
def service_env(tmp_path: Path):
    """The CLI's environment, with a `systemctl` of the test's choosing first on PATH."""
    shims = tmp_path / "bin"
    shims.mkdir()
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_RUNTIME_DIR=str(tmp_path / "run"),
               XDG_STATE_HOME=str(tmp_path / "state"), SYSTEMCTL_CALLS=str(tmp_path / "calls"),
               PATH=f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("VIRTUAL_ENV", None)

    def with_systemctl(script: str) -> dict:
        (shims / "systemctl").write_text(script)
        (shims / "systemctl").chmod(0o755)
        return env

    return with_systemctl


def tatolab(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tatolab"), *args], env=env, capture_output=True, text=True, timeout=60)


def calls(env: dict) -> list[str]:
    path = Path(env["SYSTEMCTL_CALLS"])
    return path.read_text().splitlines() if path.exists() else []


def test_install_writes_and_enables_the_unit_and_starts_nothing_as_systemctl_enable_does(service_env, tmp_path):
    env = service_env(REACHABLE)
    installed = tatolab(env, "service", "install")
    assert installed.returncode == 0, installed.stderr
    unit = tmp_path / "config" / "systemd" / "user" / "tatolabd.service"
    assert (unit.parent / "default.target.wants" / "tatolabd.service").resolve() == unit.resolve()
    assert calls(env) == ["--user show-environment", "--user daemon-reload"]  # nothing started
    assert "not started (`tatolab service install --now` starts it too)" in installed.stdout


def test_install_copies_every_setting_the_runtime_reads_and_says_which(service_env, tmp_path):
    env = {k: v for k, v in service_env(REACHABLE).items() if not k.startswith("TATOLAB_")}
    env.update(TATOLAB_MOQ_PORT="4555", TATOLAB_MACHINE_LOCK=str(tmp_path / "lock"),
               TATOLAB_CLI_TIMEOUT_S="30")  # the CLI's own: not the runtime's
    installed = tatolab(env, "service", "install")
    assert installed.returncode == 0, installed.stderr
    text = (tmp_path / "config" / "systemd" / "user" / "tatolabd.service").read_text()
    for name, value in (("TATOLAB_MOQ_PORT", "4555"), ("XDG_RUNTIME_DIR", str(tmp_path / "run")),
                        ("XDG_STATE_HOME", str(tmp_path / "state")), ("TATOLAB_MACHINE_LOCK", str(tmp_path / "lock"))):
        assert f"Environment={name}={value}\n" in text, name
    assert "TATOLAB_CLI_TIMEOUT_S" not in text and "XDG_CONFIG_HOME" not in text
    assert ("copied into it, as set here: TATOLAB_MACHINE_LOCK, TATOLAB_MOQ_PORT, XDG_RUNTIME_DIR, XDG_STATE_HOME "
            "(every Tatolab and XDG setting tatolabd reads that is set in this shell; no other)") in installed.stdout


def test_install_now_writes_a_unit_systemd_accepts_starts_it_and_uninstall_removes_it(service_env, tmp_path):
    env = service_env(REACHABLE)
    installed = tatolab(env, "service", "install", "--now")
    assert installed.returncode == 0, installed.stderr
    unit = tmp_path / "config" / "systemd" / "user" / "tatolabd.service"
    wants = unit.parent / "default.target.wants" / "tatolabd.service"
    assert wants.is_symlink() and wants.resolve() == unit.resolve()
    assert "started it" in installed.stdout
    assert "--user daemon-reload" in calls(env) and "--user restart tatolabd.service" in calls(env)
    assert "loginctl enable-linger" in installed.stdout or "Lingering is on" in installed.stdout

    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read_string(unit.read_text())
    assert parser["Service"]["ExecStart"] == str(BIN / "tatolabd")
    assert parser["Service"]["Restart"] == "on-failure"
    assert parser["Install"]["WantedBy"] == "default.target"
    assert parser["Service"]["Environment"].endswith(f"XDG_STATE_HOME={tmp_path / 'state'}")
    if shutil.which("systemd-analyze"):
        verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
        assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")

    removed = tatolab(env, "service", "uninstall")
    assert removed.returncode == 0, removed.stderr
    assert not unit.exists() and not wants.is_symlink()
    assert not wants.parent.exists() and unit.parent.is_dir()  # the empty default.target.wants/ is gone too
    assert "--user stop tatolabd.service" in calls(env)


def test_install_now_without_a_user_manager_says_so_writes_nothing_and_fails(service_env, tmp_path):
    env = service_env(NO_MANAGER)
    refused = tatolab(env, "service", "install", "--now")
    assert refused.returncode == 1
    assert "no systemd user manager is running" in refused.stderr
    assert "Failed to connect to bus" in refused.stderr
    assert "run `tatolabd` in a terminal of its own" in refused.stderr
    assert "enabled" not in refused.stdout + refused.stderr
    assert not (tmp_path / "config" / "systemd").exists()
    assert calls(env) == ["--user show-environment"]  # it asked, and started nothing


def test_install_without_a_user_manager_writes_the_unit_for_the_next_login(service_env, tmp_path):
    env = service_env(NO_MANAGER)
    installed = tatolab(env, "service", "install")
    assert installed.returncode == 0, installed.stderr
    assert (tmp_path / "config" / "systemd" / "user" / "tatolabd.service").is_file()
    assert "No systemd user manager answers now" in installed.stdout
    assert "start it now with" not in installed.stdout  # that command would fail: no bus
