"""Two copies of one test module at once: nothing the tests take from the machine (ports, users,
network namespaces, shared-memory names, state and temporary folders) is shared between them, so two
suites, or a suite and a user's own runtime, can run on one machine side by side."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import REPO

# test_sharing's tests take what a collision would break: a relay's port each (and one squatted by another
# Unix user), a second Unix user, a network namespace with its addresses, a stand-in relay's port
# (conftest.py leaves them out of a run that has this test: here they run, twice)
MODULE = "tests/test_sharing.py"


@pytest.mark.slow
def test_two_copies_of_a_test_module_run_at_once_and_both_pass(tmp_path: Path, sdk_wheel: Path) -> None:
    copies = []
    for n in (1, 2):
        argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                f"--basetemp={tmp_path / f'copy{n}'}",
                MODULE]
        copies.append(subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env=dict(os.environ, TATOLAB_TEST_WHEEL=str(sdk_wheel))))
    outputs = [copy.communicate(timeout=900)[0] for copy in copies]
    for copy, output in zip(copies, outputs):
        assert copy.returncode == 0, output[-6000:]
        summary = re.search(r"(\d+) passed", output)
        assert summary and int(summary.group(1)) >= 4 and "skipped" not in output, output[-3000:]
