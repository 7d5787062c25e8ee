"""A second Unix user, made for the test session: what another user on the machine can and cannot do.

The tests run as root (in CI too); without root they skip. Python from the test environment
may live where the other user cannot reach (``/root/.pyenv``), so a Python process "as the
other user" starts as root, imports what it needs, then drops to that user for good
(uid, gid and groups) before it does anything the test looks at.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import psutil
import pytest

# What a tatolabd needs, imported before the drop; the rest of the standard library may be out of reach.
# (hashlib: paths.py imports it only when asked for a digest, so that the CLI starts quicker; difflib
# and ipaddress likewise, in _settings.py)
RUNTIME_MODULES = ("tatolab._runtime.daemon", "tatolab._runtime.entry", "asyncio.unix_events", "encodings.idna",
                   "hashlib", "difflib", "ipaddress")  # (the last two: imported where used, for the CLI's start)


@dataclass
class OtherUser:
    name: str
    uid: int
    gid: int
    home: Path  # a folder of the other user's own (0700), outside the tests' root-only temporary folders

    def run(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """A plain program (cat, ln, mkdir) as the other user."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 30)
        return subprocess.run(list(argv), user=self.uid, group=self.gid, extra_groups=[], cwd=self.home, **kwargs)

    def python(self, code: str, *, preload: Sequence[str] = (), env: dict[str, str] | None = None,
               **kwargs) -> subprocess.Popen:
        """``code`` in a Python process that is the other user once it runs."""
        imports = "".join(f"import {module}\n" for module in preload)
        prelude = (
            f"import os, sys\n{imports}"
            f"os.setgroups([]); os.setgid({self.gid}); os.setuid({self.uid}); os.chdir({str(self.home)!r})\n"
        )
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        return subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                                env=dict(env or os.environ, HOME=str(self.home)), start_new_session=True, **kwargs)

    def tatolabd(self, env: dict[str, str], **kwargs) -> subprocess.Popen:
        """A tatolabd of the other user's."""
        code = "from tatolab._runtime.entry import main\nsys.argv = ['tatolabd']\nmain()\n"
        return self.python(code, preload=RUNTIME_MODULES, env=env, **kwargs)

    def processes(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["uids"]):
            uids = process.info.get("uids")
            if uids is not None and uids.real == self.uid:
                found.append(process)
        return found


def _end(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=10)


@pytest.fixture(scope="session")
def other_user() -> Iterator[OtherUser]:
    """A uniquely named second user, deleted (with anything it left running) after the session."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second Unix user with useradd (CI runs the tests as root)")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("needs useradd and userdel (package passwd) to create a second Unix user")
    name = f"ttl{uuid.uuid4().hex[:12]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    home = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    try:
        import pwd

        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        os.chmod(home, 0o700)
        user = OtherUser(name, entry.pw_uid, entry.pw_gid, home)
        yield user
        _end(user.processes())
    finally:
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder like /tmp (mode 1777): every user may create names in it."""
    path = Path(tempfile.mkdtemp(prefix="tatolab-shared-"))
    os.chmod(path, 0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
