from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

from harness import REPO, Runtime
from other_user import other_user, shared_dir  # noqa: F401  (fixtures for any test module)


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


@pytest.fixture
def runtime(tmp_path: Path):
    """A started tatolabd on temporary paths; afterwards nothing of it may be left."""
    rt = Runtime(tmp_path / "rt").start()
    yield rt
    output = rt.stop()
    assert rt.leftover_processes() == [], f"processes left behind: {rt.leftover_processes()}\n{output}"
    assert rt.shm_files() == [], f"shared-memory files left behind: {rt.shm_files()}"
    assert not rt.socket.exists(), "the control socket was left behind"
