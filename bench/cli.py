"""How long a CLI command takes beside `python -c pass` with the same interpreter, in one run.

    .venv/bin/python bench/cli.py [--runs 9] [--python PATH]

Starts a real tatolabd on temporary paths (bench/_runtime.py) with one stream of one node
running, then times `tatolab streams`, `tatolab --help` and `tatolab graph` against
`python -c pass`, interleaved (one of each in turn, so a load that comes and goes falls on
all of them alike). The figure is each command's median wall time over the runs and its
ratio to the median `python -c pass` (the goal: streams and --help within 1.5x). Here tatolab
is an editable install, whose import finder every start pays (`python -c pass` too), so the
same is also timed without site (-S, the package found from its folder) against `python -S -c
pass`: what a plain install's start costs, less its site-packages.
--python runs the commands with another environment's interpreter (a copy of an older
checkout, for a before/after in the same run); the runtime is always this one's.
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _runtime import isolated_runtime, wait_for  # noqa: E402

NODE = """
from tatolab.stream import node


@node(execution="continuous", interval_ms=100)
class Ticker:
    @node.output()
    def out(self) -> dict: ...

    def process(self, ctx) -> None:
        ctx.outputs.write("out", {"t": ctx.time})
"""

STREAM = """
from tatolab.stream import StreamBuilder, stream
from nodes.ticker import Ticker


@stream
def ticking(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Ticker)
"""


def commands(python: Path) -> dict[str, list[str]]:
    cli = [str(python.parent / "tatolab")]  # the installed entry point, as a user runs it
    # -S: no site, so no editable install's import finder (which every start pays here, the
    # bare `python -c pass` included); the package from its folder, as an installed one is found
    bare = [str(python), "-S", "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'tatolab'; "
            "from tatolab._cli.main import main; main()", str(python.parents[2])]
    return {
        "python -c pass": [str(python), "-c", "pass"],
        "tatolab streams": [*cli, "streams"],
        "tatolab --help": [*cli, "--help"],
        "tatolab graph": [*cli, "graph", "--stream", "ticking"],
        "python -S -c pass": [str(python), "-S", "-c", "pass"],
        "tatolab streams (-S)": [*bare, "streams"],
        "tatolab --help (-S)": [*bare, "--help"],
    }


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """One command's wall time, ms. Waited for with a blocking wait: subprocess's wait with a
    timeout polls with doubling sleeps (0.5, 1, 2 ... 32 ms), which rounded every figure up to
    about 16, 32 or 64 ms."""
    began = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code = process.wait()
    ended = time.perf_counter()
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {code}")
    return (ended - began) * 1000


def measure(pythons: dict[str, Path], runs: int) -> dict[str, dict[str, float]]:
    with isolated_runtime("tatolab-bench-cli-") as (root, env, _):
        project = root / "project"
        (project / "nodes").mkdir(parents=True)
        (project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        for name, text in {"stream.py": STREAM, "nodes/__init__.py": "", "nodes/ticker.py": NODE}.items():
            (project / name).write_text(textwrap.dedent(text))
        subprocess.run([str(Path(sys.executable).parent / "tatolab"), "run", "-d"], cwd=project, env=env,
                       check=True, capture_output=True, timeout=120)
        wait_for(lambda: b"ticking" in subprocess.run([str(Path(sys.executable).parent / "tatolab"), "streams"],
                                                     cwd=project, env=env, capture_output=True).stdout,
                 120, "the stream listed")
        plans = {label: commands(python) for label, python in pythons.items()}
        for plan in plans.values():  # warm the page cache and the .pyc files once
            for argv in plan.values():
                timed(argv, env, project)
        samples: dict[str, dict[str, list[float]]] = {
            label: {name: [] for name in plan} for label, plan in plans.items()}
        for _ in range(runs):
            for label, plan in plans.items():
                for name, argv in plan.items():
                    samples[label][name].append(timed(argv, env, project))
    return {label: {name: statistics.median(values) for name, values in by_name.items()}
            for label, by_name in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", type=Path, help="also time another environment's interpreter (before)")
    args = parser.parse_args()
    pythons = {"this": Path(sys.executable)}
    if args.python:
        pythons = {"other": args.python, **pythons}
    load = os.getloadavg()[0]
    figures = measure(pythons, args.runs)
    print(f"bench/cli.py: {os.cpu_count()} cores, load average {load:.2f}, median of {args.runs}, interleaved")
    result: dict[str, dict[str, float]] = {}
    for label, medians in figures.items():
        base = medians["python -c pass"]
        print(f"{label} ({pythons[label]})")
        for name, ms in medians.items():
            ref = medians["python -S -c pass"] if "-S" in name else base
            print(f"  {name:<22}{ms:8.1f} ms{ms / ref:7.2f}x")
        result[label] = {**{f"{name} ms": round(ms, 1) for name, ms in medians.items()},
                         "streams_ratio": round(medians["tatolab streams"] / base, 2),
                         "help_ratio": round(medians["tatolab --help"] / base, 2),
                         "graph_ratio": round(medians["tatolab graph"] / base, 2),
                         "streams_ratio_no_site": round(medians["tatolab streams (-S)"] / medians["python -S -c pass"], 2),
                         "help_ratio_no_site": round(medians["tatolab --help (-S)"] / medians["python -S -c pass"], 2)}
    print(json.dumps({"bench": "cli", "runs": args.runs, "load": round(load, 2), **result}))


if __name__ == "__main__":
    main()
