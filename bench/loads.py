"""How many `tatolab run -d` a machine completes a second: all at once beside one after another.

    .venv/bin/python bench/loads.py [--count 20] [--rounds 3]

Each round starts a fresh tatolabd on temporary paths (bench/_runtime.py) twice: on one, COUNT
projects (each a tiny stream of three Python nodes: a source, a relay, a sink) are kept with
`tatolab run -d` one after another; on the other, all COUNT commands start at once. A command
counts once it returned 0 (its stream kept and its nodes started, or told which are not yet);
a command that fails is counted and shown. Meanwhile `streams` is asked over and over on the
socket, and how long it took to answer is reported (median and worst).

Prints one line per round, the medians, then the whole result as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

from _runtime import isolated_runtime  # noqa: E402
from nodes_fixture import TINY_NODES, tiny_stream  # noqa: E402

def make_projects(root: Path, count: int) -> list[Path]:
    projects = []
    for i in range(count):
        folder = root / f"p{i}"
        (folder / "nodes").mkdir(parents=True)
        (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)  # this environment holds tatolab
        (folder / "stream.py").write_text(tiny_stream(f"load{i}"))
        (folder / "nodes" / "__init__.py").write_text("")
        (folder / "nodes" / "tiny.py").write_text(TINY_NODES.lstrip())
        projects.append(folder)
    return projects


class StreamsProbe:
    """Asks `streams` over and over on a fresh connection; keeps how long each answer took."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            began = time.monotonic()
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(60)
                sock.connect(str(self.path))
                sock.sendall(b'{"op": "streams", "args": {}}\n')
                sock.makefile("rb").readline()
            self.seconds.append(time.monotonic() - began)
            self.done.wait(0.05)

    def __enter__(self) -> "StreamsProbe":
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.done.set()
        self.thread.join()


def one_batch(count: int, parallel: bool) -> dict[str, Any]:
    with isolated_runtime("tatolab-bench-loads-") as (root, env, sock):
        projects = make_projects(root / "projects", count)
        with StreamsProbe(sock) as probe:
            began = time.monotonic()
            if parallel:
                commands = [subprocess.Popen([str(BIN / "tatolab"), "run", "-d"], cwd=p, env=env, text=True,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in projects]
                outcomes = [(c.wait(), c.communicate()[1]) for c in commands]
            else:
                outcomes = []
                for p in projects:
                    done = subprocess.run([str(BIN / "tatolab"), "run", "-d"], cwd=p, env=env, text=True,
                                          capture_output=True)
                    outcomes.append((done.returncode, done.stderr))
            seconds = time.monotonic() - began
        failed = [err.strip().splitlines()[-1:] for code, err in outcomes if code != 0]
        told = sum("waiting for its turn" in err for _, err in outcomes)
        waits = sorted(probe.seconds) or [0.0]
        return {"count": count, "seconds": round(seconds, 2), "per_s": round((count - len(failed)) / seconds, 2),
                "failed": failed, "told_place": told, "streams_median_ms": round(statistics.median(waits) * 1000, 1),
                "streams_max_ms": round(waits[-1] * 1000, 1), "streams_asked": len(probe.seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20, help="run -d commands per batch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    for index in range(args.rounds):
        serial = one_batch(args.count, parallel=False)
        parallel = one_batch(args.count, parallel=True)
        rounds.append({"serial": serial, "parallel": parallel})
        print(f"round {index + 1}: one after another {serial['per_s']}/s ({serial['seconds']} s, "
              f"{len(serial['failed'])} failed); all at once {parallel['per_s']}/s ({parallel['seconds']} s, "
              f"{len(parallel['failed'])} failed, {parallel['told_place']} told their place); streams answered in "
              f"{parallel['streams_median_ms']} ms median, {parallel['streams_max_ms']} ms worst", flush=True)
    result = {
        "count": args.count, "cpus": os.cpu_count(), "load_average": os.getloadavg(),
        "serial_per_s": statistics.median(r["serial"]["per_s"] for r in rounds),
        "parallel_per_s": statistics.median(r["parallel"]["per_s"] for r in rounds),
        "failed": sum(len(r["serial"]["failed"]) + len(r["parallel"]["failed"]) for r in rounds),
        "rounds": rounds,
    }
    print(f"median: one after another {result['serial_per_s']} run -d/s, all at once {result['parallel_per_s']} "
          f"run -d/s, {result['failed']} failed (load average {', '.join(f'{x:.1f}' for x in result['load_average'])} "
          f"on {result['cpus']} CPUs)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
