"""McapSource's reading against files made to exhaust memory: peak RSS, ours beside the mcap library's.

    .venv/bin/python bench/mcap_bombs.py [--cap-mb 3072]

Writes the files of tests/mcap_bombs.py (a zstd and an lz4 chunk declaring 2 GB of zeros, the same
chunks declaring 1 MB, and a million small messages without an index), then reads each in a process
of its own: once as McapSource reads it now (tatolab/_recorder/reading.py, bounded) and once as the
``mcap`` library reads a file without an index (``NonSeekingReader``, what McapSource used before),
each capped at ``--cap-mb`` of address space so a bomb cannot take the machine, and stopped after
``--limit-s``. Prints, per file, its size, what each said (the first line), its peak RSS (polled,
with ``+`` for a reader stopped still going) and its CPU seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from mcap_bombs import bomb, many_messages  # noqa: E402

OURS = """
from pathlib import Path
from tatolab._recorder.reading import Recording, RecordingError
try:
    recording = Recording(Path(PATH))
    channel = recording.channel(None)
    said = f"played {sum(1 for _ in recording.messages(channel, None, None))} messages"
except RecordingError as exc:
    said = f"refused: {exc}"
"""
LIBRARY = """
from mcap.reader import NonSeekingReader
with open(PATH, "rb") as f:
    try:
        said = f"played {sum(1 for _ in NonSeekingReader(f).iter_messages(log_time_order=False))} messages"
    except MemoryError:
        said = "MemoryError (hit the cap)"
    except Exception as exc:
        said = f"{type(exc).__name__}: {exc}"
"""
FRAME = """
import resource, sys
cap = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
PATH = sys.argv[1]
{body}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(said.splitlines()[0][:150])
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) // 1024
print(peak, round(usage.ru_utime + usage.ru_stime, 2))
"""


def read(code: str, path: Path, cap: int, limit_s: float) -> tuple[str, str, str]:
    """(what it said, peak RSS MB, CPU s); a reader still going after ``limit_s`` is stopped, its
    peak so far (polled) reported."""
    child = subprocess.Popen([sys.executable, "-c", FRAME.format(body=code), str(path), str(cap)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched = psutil.Process(child.pid)
    peak = cpu = 0.0
    deadline = time.monotonic() + limit_s
    while child.poll() is None and time.monotonic() < deadline:
        try:
            peak = max(peak, watched.memory_info().rss / 2**20)
            times = watched.cpu_times()
            cpu = times.user + times.system
        except psutil.Error:
            pass
        time.sleep(0.05)
    if child.poll() is None:
        child.kill()
        child.communicate()
        return f"still reading after {limit_s:g} s", f"{peak:.0f}+", f"{cpu:.1f}"
    out, err = child.communicate()
    lines = out.strip().splitlines()
    if child.returncode or len(lines) < 2:
        return (err.strip().splitlines() or ["?"])[-1][:150], f"{peak:.0f}", f"{cpu:.1f}"
    peak_said, cpu_said = lines[1].split()
    return lines[0], peak_said, cpu_said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mb", type=int, default=3072)
    parser.add_argument("--limit-s", type=float, default=30.0, help="stop a reader still going after this long")
    args = parser.parse_args()
    cap = args.cap_mb << 20
    with tempfile.TemporaryDirectory(prefix="tatolab-bombs-") as tmp:
        folder = Path(tmp)
        files = {
            "zstd, declares 2 GB": lambda p: bomb(p, "zstd", 2 << 30, 2 << 30),
            "zstd, declares 1 MB, holds 2 GB": lambda p: bomb(p, "zstd", 2 << 30, 1 << 20),
            "lz4, declares 2 GB": lambda p: bomb(p, "lz4", 2 << 30, 2 << 30),
            "lz4, declares 1 MB, holds 2 GB": lambda p: bomb(p, "lz4", 2 << 30, 1 << 20),
            "1M messages, no index": lambda p: many_messages(p, 1_000_000),
        }
        print(f"{'file':34} {'size':>10}  {'reader':8} {'peak RSS MB':>11} {'CPU s':>6}  said")
        for i, (what, make) in enumerate(files.items()):
            path = folder / f"{i}.mcap"
            size = make(path)
            for name, code in (("ours", OURS), ("library", LIBRARY)):
                said, peak, cpu = read(code, path, cap, args.limit_s)
                print(f"{what:34} {size:>10}  {name:8} {peak:>11} {cpu:>6}  {said}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
