"""The two install profiles: a project's .venv holds the SDK with light dependencies only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_project_venv_has_the_sdk_without_runtime_dependencies(project_venv: Path):
    python = str(project_venv / "bin" / "python")
    check = subprocess.run(
        [python, "-c", "import importlib.util as u, tatolab.stream, tatolab._host.main; "
                       "from tatolab.stream import TestPatternSource, GlslPixelEffect, VideoFrame; "
                       "print([m for m in ('psutil', 'watchfiles', 'numpy', 'moderngl', 'PIL', 'moq') if u.find_spec(m)])"],
        capture_output=True, text=True, check=True,
    )
    assert check.stdout.strip() == "[]"


@pytest.mark.slow
def test_tatolabd_without_the_runtime_extras_says_how_to_install_them(project_venv: Path):
    done = subprocess.run([str(project_venv / "bin" / "tatolabd")], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "tatolabd needs psutil, watchfiles, numpy, moderngl, av, soxr, sounddevice, moq, cryptography" in done.stderr
    assert "uv tool install '/path/to/tatolab[runtime]'" in done.stderr
    assert "pip install 'tatolab[runtime]'" not in done.stderr  # the index's tatolab is a placeholder
