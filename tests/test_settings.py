"""Settings from the environment and number arguments: a value not allowed is refused at start
with what is allowed (never quietly replaced, never an internal error later)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest
from harness import BIN

from tatolab import _settings as settings
from tatolab._control.errors import ControlError
from tatolab._runtime.stored.logread import parse_since
from tatolab._runtime.ops.logs import log_events
from tatolab._runtime.stored.logread import LogFilter

ROOT = Path(__file__).resolve().parent.parent


def run(program: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / program), *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **env})


def test_a_bad_runtime_setting_stops_tatolabd_with_what_is_allowed(tmp_path: Path):
    result = run("tatolabd", TATOLAB_SURFACE_SLOTS="-3", TATOLAB_LINK_MEMORY_MB="lots",
                 TATOLAB_MACHINE_LOCK=str(tmp_path), XDG_RUNTIME_DIR=str(tmp_path / "run"),
                 XDG_STATE_HOME=str(tmp_path / "state"))
    assert result.returncode == 1
    assert ("error: TATOLAB_SURFACE_SLOTS='-3' is not allowed: give a whole number from 1 to 1024 (default: 32), "
            "or unset it") in result.stderr
    assert "TATOLAB_LINK_MEMORY_MB='lots' is not allowed" in result.stderr  # every bad one, at once
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before it made anything


def test_a_bad_command_setting_stops_the_command():
    result = run("tatolab", "streams", TATOLAB_CLI_TIMEOUT_S="abc")
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: TATOLAB_CLI_TIMEOUT_S='abc' is not allowed: give a number of seconds "
                                      "from 0.1 to 86400 (default: 60), or unset it")
    relative = run("tatolab", "streams", XDG_RUNTIME_DIR="run/here")
    assert "XDG_RUNTIME_DIR='run/here' is not allowed: give an absolute path" in relative.stderr


def test_a_misspelt_setting_is_warned_about():
    assert settings.unknown({"TATOLAB_SURFACE_SLOT": "8", "TATOLAB_LOG_FD": "3", "PATH": "/bin"}) == [
        "TATOLAB_SURFACE_SLOT is not a setting of Tatolab, so it changes nothing (did you mean TATOLAB_SURFACE_SLOTS?)"]


def test_the_cli_warns_of_a_misspelt_setting_as_readme_says(tmp_path):
    result = run("tatolab", "streams", TATOLAB_MOQ_PROT="4444", XDG_RUNTIME_DIR=str(tmp_path))
    assert result.stderr.splitlines()[0] == ("warning: TATOLAB_MOQ_PROT is not a setting of Tatolab, so it changes "
                                             "nothing (did you mean TATOLAB_MOQ_PORT?)")


def test_values_in_range_are_read_and_unset_gives_the_default():
    assert settings.value("TATOLAB_SURFACE_SLOTS", {"TATOLAB_SURFACE_SLOTS": "6"}) == 6
    assert settings.value("TATOLAB_SURFACE_SLOTS", {}) == 32
    assert settings.value("TATOLAB_MOQ_PUBLIC", {"TATOLAB_MOQ_PUBLIC": ""}) == []  # empty: none
    assert settings.value("TATOLAB_MOQ_PUBLIC", {}) is None  # unset: Tailscale's
    assert settings.value("TATOLAB_TRUST", {"TATOLAB_TRUST": "/a:/b"}) == ["/a", "/b"]
    assert settings.value("TATOLAB_TRUST", {"TATOLAB_TRUST": "*"}) == ["*"]
    for name, text in [("TATOLAB_CLI_TIMEOUT_S", "nan"), ("TATOLAB_MOQ_PORT", "70000"), ("TATOLAB_WARM", "yes"),
                       ("TATOLAB_MACHINE_NAME", "a b"), ("TATOLAB_TRUST", "relative/path")]:
        with pytest.raises(settings.SettingError, match=f"{name}='{re.escape(text)}' is not allowed"):
            settings.value(name, {name: text})


def test_every_setting_the_code_reads_is_in_the_table_and_in_readme():
    read = set()
    for path in (ROOT / "tatolab").rglob("*.py"):
        read |= set(re.findall(r"\bTATOLAB_[A-Z_]*[A-Z]\b", path.read_text()))
    assert read - set(settings.SETTINGS) - set(settings.INTERNAL) == set()
    assert settings.readme_table() in (ROOT / "README.md").read_text()


def test_number_arguments_out_of_range_are_refused_by_the_command(tmp_path: Path):
    for args, said in [(("logs", "--stream", "s", "--tail", "-5"), "argument --tail: '-5' is not allowed: give a "
                        "whole number of records, 0 or more"),
                       (("exchange", "s/n/p", "--timeout", "-1"), "argument --timeout: '-1' is not allowed: give a "
                        "number of seconds, 0 or more (0: never)"),
                       (("tap", "s/n/p", "--count", "0"), "argument --count: '0' is not allowed")]:
        result = run("tatolab", *args)
        assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr
    logs = tmp_path / ".streamlib" / "logs"
    logs.mkdir(parents=True)
    (logs / "s.jsonl").write_text('{"message": "hi", "level": "info", "time": "2026-01-01T00:00:00+00:00"}\n')
    far = run("tatolab", "logs", "--stream", "s", "--dir", str(tmp_path), "--since", "99999999999999999999d")
    assert far.returncode == 1 and "Traceback" not in far.stderr
    assert "--since '99999999999999999999d' reaches back further than any time can be written" in far.stderr


def test_the_runtime_refuses_what_a_client_sends_out_of_range(tmp_path: Path):
    with pytest.raises(ControlError, match="reaches back further"):
        parse_since("99999999999999999999d")
    with pytest.raises(ControlError, match="tail must be a whole number, 0 or more"):
        asyncio.run(_first(log_events("s", tmp_path / "s.jsonl", LogFilter.of(None, None, None), tail=-5,
                                      follow=False)))


async def _first(events):
    async for event in events:
        return event
