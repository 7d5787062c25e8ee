"""The ring's seqlock under threads (tests/ring_stress.c runs tatolab/_links/ring_protocol.h, the
C11 atomics _native.c is built from): every bag a reader accepts is whole, natively and on
arm64, a machine that reorders memory, run under qemu-aarch64. CI installs the cross compiler
and qemu (.ci/run: gcc-aarch64-linux-gnu, qemu-user); elsewhere the arm64 run skips, saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("ring_stress.c")
BAGS = 100_000


def _stress(compiler: str, tmp_path: Path, *, run: tuple[str, ...] = (), flags: tuple[str, ...] = ()) -> dict[str, int]:
    program = tmp_path / "ring_stress"
    subprocess.run([compiler, "-O2", "-std=c11", "-Wall", "-pthread", *flags, "-o", str(program), str(SOURCE)],
                   check=True, capture_output=True, text=True)
    done = subprocess.run([*run, str(program), str(BAGS), "3"], capture_output=True, text=True, timeout=300)
    words = done.stdout.split()
    counts = {name: int(value) for name, value in zip(words[::2], words[1::2])}
    assert done.returncode == 0 and counts["bad"] == 0, f"torn bags got through:\n{done.stdout}{done.stderr}"
    assert counts["read"] >= BAGS // 10, f"the readers read too little to tell: {done.stdout}"
    return counts


def test_every_bag_read_is_whole_natively(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (apt install gcc)")
    _stress(compiler, tmp_path)


def test_every_bag_read_is_whole_on_arm64_under_qemu(tmp_path):
    compiler, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if compiler is None or qemu is None:
        pytest.skip("no arm64 cross compiler or qemu-aarch64 (apt install gcc-aarch64-linux-gnu qemu-user)")
    _stress(compiler, tmp_path, run=(qemu,), flags=("-static",))
    # qemu runs the guest's threads on this machine's CPU, whose order may hide a missing barrier:
    # so check too that the arm64 code carries them (load-acquire, store-release, dmb)
    objdump = shutil.which("aarch64-linux-gnu-objdump")
    if objdump is not None:
        code = subprocess.run([objdump, "-d", str(tmp_path / "ring_stress")], capture_output=True, text=True).stdout
        for function in ("writer", "reader"):
            body = code.split(f"<{function}>:", 1)[1].split("\n\n", 1)[0]
            assert "dmb" in body and ("ldar" in body or "stlr" in body), f"no barrier in {function}:\n{body}"
