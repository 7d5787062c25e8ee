"""McapSource's reading against files made to exhaust memory: peak RSS, ours beside the mcap library's.

    .venv/bin/python bench/mcap_bombs.py [--cap-mb 3072]

Writes the files of tests/mcap_bombs.py (a zstd and an lz4 chunk declaring 2 GB of zeros, the same
chunks declaring 1 MB, and a million small messages without an index), then reads each in a process
of its own: once as McapSource reads it now (tatolab/_recorder/reading.py, bounded) and once as the
``mcap`` library reads a file without an index (``NonSeekingReader``, what McapSource used before),
each capped at ``--cap-mb`` of address space so a bomb cannot take the machine. Prints, per file,
its size, what each said (the first line), its peak RSS and its CPU seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

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
print(usage.ru_maxrss // 1024, round(usage.ru_utime + usage.ru_stime, 2))
"""


def read(code: str, path: Path, cap: int) -> tuple[str, str, str]:
    done = subprocess.run([sys.executable, "-c", FRAME.format(body=code), str(path), str(cap)],
                          capture_output=True, text=True, check=False, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode or len(lines) < 2:
        return (done.stderr.strip().splitlines() or ["?"])[-1][:150], "?", "?"
    peak, cpu = lines[1].split()
    return lines[0], peak, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mb", type=int, default=3072)
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
                said, peak, cpu = read(code, path, cap)
                print(f"{what:34} {size:>10}  {name:8} {peak:>11} {cpu:>6}  {said}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
