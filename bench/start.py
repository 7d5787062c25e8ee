"""What a user waits for around the links: starting, reloading, restarting, and the CLI.

    .venv/bin/python bench/start.py [--sizes 2,10,50] [--reloads 3] [--cli-runs 5]

Starts a real tatolabd on temporary paths (bench/_runtime.py) and a project whose .venv is
this environment: a chain source -> relay0 -> ... -> sink of N Python nodes (the stream
function reads N from CHAIN_NODES, which the CLI's environment carries). The source sends
100 bags/s; each relay tags a bag with its pid and the VERSION of a module it imports
indirectly (nodes/version.py through nodes/tag.py); the sink writes one line, with its
monotonic time, each time the (version, pid) pair it sees changes. All times below come
from that one clock (time.monotonic_ns, shared by every process on the machine):

  run -d N       `tatolab run -d` began -> the last node's first bag, for each N
  run -d return  how long the command itself took
  attached       `tatolab run` began -> first bag at the sink (3 nodes)
  dev reload     the save of nodes/version.py -> first bag of the new version at the sink
  restart        SIGKILL of the last relay -> first bag through its successor
  CLI            each command's wall time beside `python -c pass`
  memory         PSS of the runtime, its helper processes and each node (USS: what a node
                 does not share with anyone)

Prints a table, then the whole result as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import psutil

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))

from _runtime import isolated_runtime, wait_for  # noqa: E402

FILES = {
    "stream.py": """
        import os
        from tatolab.stream import StreamBuilder, stream
        from nodes.source import Source
        from nodes.relay import Relay
        from nodes.sink import Sink


        @stream
        def chain(stream_builder: StreamBuilder) -> None:
            count = int(os.environ.get("CHAIN_NODES", "3"))
            previous = stream_builder.add(Source)
            for index in range(count - 2):
                relay = stream_builder.add(Relay, name=f"relay{index}")
                stream_builder.connect(previous.output("out"), relay.input("inp"))
                previous = relay
            sink = stream_builder.add(Sink, config={"path": os.environ.get("CHAIN_OUT", "out.jsonl")})
            stream_builder.connect(previous.output("out"), sink.input("inp"))
    """,
    "nodes/__init__.py": "",
    "nodes/source.py": """
        from tatolab.stream import node


        @node(execution="continuous", interval_ms=10)
        class Source:
            @node.output()
            def out(self) -> dict: ...

            def __init__(self) -> None:
                self.n = 0

            def process(self, ctx) -> None:
                ctx.outputs.write("out", {"n": self.n})
                self.n += 1
    """,
    "nodes/tag.py": """
        import os
        from nodes import version


        def tag(bag: dict) -> dict:
            bag["v"] = version.VERSION
            bag["pid"] = os.getpid()
            return bag
    """,
    "nodes/relay.py": """
        from tatolab.stream import node
        from nodes.tag import tag


        @node
        class Relay:
            @node.input(delivery_profile="newest")
            def inp(self) -> dict: ...

            @node.output()
            def out(self) -> dict: ...

            def process(self, ctx) -> None:
                bag = ctx.inputs.read("inp")
                if bag is not None:
                    ctx.outputs.write("out", tag(bag))
    """,
    "nodes/sink.py": """
        import json
        from dataclasses import dataclass
        from tatolab.stream import node


        @dataclass
        class SinkConfig:
            path: str


        @node
        class Sink:
            @node.input(delivery_profile="newest")
            def inp(self) -> dict: ...

            def __init__(self, config: SinkConfig) -> None:
                self.file = open(config.path, "a", buffering=1)
                self.seen = None

            def process(self, ctx) -> None:
                bag = ctx.inputs.read("inp")
                if bag is None:
                    return
                key = (bag.get("v"), bag.get("pid"))
                if key != self.seen:  # one line per (version, relay process) seen
                    self.seen = key
                    self.file.write(json.dumps({"v": key[0], "pid": key[1], "read_ns": ctx.time}) + "\\n")
    """,
}

VERSION = "VERSION = {version}\n"


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """The tests' wait_for, polling every 2 ms (the figures are first-bag times); a timeout
    ends the bench with its one line."""
    try:
        return wait_for(condition, timeout, what, poll_s=0.002)
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None


def rows(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def first(path: Path, where: Callable[[dict[str, Any]], bool] = lambda row: True) -> dict[str, Any] | None:
    return next((row for row in rows(path) if where(row)), None)


class Bench:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.project = root / "project"
        (self.project / "nodes").mkdir(parents=True)
        (self.project / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        for name, text in FILES.items():
            (self.project / name).write_text(textwrap.dedent(text).lstrip())
        (self.project / "nodes" / "version.py").write_text(VERSION.format(version=0))

    def cli_env(self, nodes: int, out: str) -> dict[str, str]:
        return dict(self.env, CHAIN_NODES=str(nodes), CHAIN_OUT=out)

    def tatolab(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
        result = subprocess.run([str(BIN / "tatolab"), *args], env=env or self.env, cwd=self.project,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise SystemExit(f"tatolab {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def popen(self, *args: str, env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "tatolab"), *args], env=env, cwd=self.project,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def runtime(self) -> psutil.Process:
        for child in psutil.Process().children():
            if "tatolabd" in " ".join(child.cmdline()):
                return child
        raise SystemExit("no tatolabd found among this process's children")

    def run_detached(self, nodes: int, run: int) -> dict[str, Any]:
        out = self.project / f"out-{run}-{nodes}.jsonl"
        env = self.cli_env(nodes, out.name)
        began = time.monotonic_ns()
        said = subprocess.run([str(BIN / "tatolab"), "run", "-d", "--name", f"chain{nodes}"], env=env,
                              cwd=self.project, capture_output=True, text=True, timeout=120)
        returned = time.monotonic_ns()
        if said.returncode != 0:
            raise SystemExit(f"tatolab run -d failed: {said.stderr.strip()}")
        row = wait_until(lambda: first(out), 120, f"the first bag through {nodes} nodes")
        result = {"nodes": nodes, "first_bag_ms": (row["read_ns"] - began) / 1e6,
                  "command_ms": (returned - began) / 1e6, "said": (said.stdout + said.stderr).strip()}
        if nodes == max(self.sizes) and not self.measured:
            result["memory"] = self.memory(f"chain{nodes}")
            self.measured = True
        self.tatolab("rm", f"chain{nodes}")
        return result

    def memory(self, stream: str) -> dict[str, Any]:
        """PSS of the runtime, of the stream's node processes (their pids from `tatolab graph`)
        and of anything else the runtime started (a warm parent)."""
        graph = json.loads(self.tatolab("graph", "--stream", stream))
        node_pids = {node["pid"] for s in graph["streams"] for node in s["nodes"] if node.get("pid")}
        daemon = self.runtime()
        nodes, reapers, helpers = [], [], []
        for process in daemon.children(recursive=True):
            try:
                info = process.memory_full_info()
                reaper = "tatolab._runtime.processes.reaper" in " ".join(process.cmdline())
                kind = nodes if process.pid in node_pids else reapers if reaper else helpers
            except psutil.Error:
                continue
            kind.append({"pss": info.pss, "uss": info.uss})
        info = daemon.memory_full_info()
        mib = 1024 * 1024
        return {
            "runtime_pss_mib": round(info.pss / mib, 1),
            "nodes": len(nodes),
            "node_pss_mib_median": round(statistics.median(n["pss"] for n in nodes) / mib, 1) if nodes else None,
            "node_uss_mib_median": round(statistics.median(n["uss"] for n in nodes) / mib, 1) if nodes else None,
            # one a runtime (tatolab/_runtime/processes/reaper.py): ends the nodes' groups should the runtime be killed
            "reaper_uss_mib": round(sum(r["uss"] for r in reapers) / mib, 2),
            "helpers": len(helpers),  # warm interpreters
            "helpers_pss_mib": round(sum(h["pss"] for h in helpers) / mib, 1),
        }

    def attached_and_restart(self) -> dict[str, Any]:
        out = self.project / "out-attached.jsonl"
        env = self.cli_env(3, out.name)
        began = time.monotonic_ns()
        run = self.popen("run", "--name", "attached", env=env)
        try:
            row = wait_until(lambda: first(out), 60, "the attached stream's first bag")
            result = {"first_bag_ms": (row["read_ns"] - began) / 1e6}
            time.sleep(1.0)  # settle: the stream runs steadily before its relay is killed
            pid = rows(out)[-1]["pid"]
            killed = time.monotonic_ns()
            os.kill(pid, signal.SIGKILL)
            row = wait_until(lambda: first(out, lambda r: r["read_ns"] > killed and r["pid"] != pid), 30,
                             "a bag through the restarted relay")
            result["restart_first_bag_ms"] = (row["read_ns"] - killed) / 1e6
            result["cli"] = self.cli_times()
            return result
        finally:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=30)

    def cli_times(self) -> dict[str, float]:
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "tatolab streams": [str(BIN / "tatolab"), "streams"],
            "tatolab graph": [str(BIN / "tatolab"), "graph", "--stream", "attached"],
            "tatolab tap --count 1": [str(BIN / "tatolab"), "tap", "attached/source/out", "--count", "1"],
        }
        times: dict[str, float] = {}
        for label, argv in commands.items():
            samples = []
            for _ in range(self.cli_runs):
                began = time.perf_counter()
                # (no timeout: subprocess's timed wait polls in doubling sleeps, rounding the figure up)
                subprocess.run(argv, env=self.env, cwd=self.project, capture_output=True, check=True)
                samples.append((time.perf_counter() - began) * 1000)
            times[label] = round(statistics.median(samples), 1)
        return times

    def dev_reloads(self, reloads: int) -> list[float]:
        out = self.project / "out-dev.jsonl"
        version = self.project / "nodes" / "version.py"
        dev = self.popen("dev", "--name", "dev", env=self.cli_env(3, out.name))
        try:
            wait_until(lambda: first(out, lambda r: r["v"] == 0), 60, "dev's first version")
            figures = []
            for n in range(1, reloads + 1):
                time.sleep(0.5)  # settle: each reload starts from a steady stream
                written = time.monotonic_ns()
                version.write_text(VERSION.format(version=n))
                row = wait_until(lambda: first(out, lambda r: r["v"] == n), 60, f"version {n}'s first bag")
                figures.append((row["read_ns"] - written) / 1e6)
            return figures
        finally:
            dev.send_signal(signal.SIGINT)
            dev.wait(timeout=30)
            version.write_text(VERSION.format(version=0))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,10,50", help="chain lengths for run -d (default 2,10,50)")
    parser.add_argument("--reloads", type=int, default=3)
    parser.add_argument("--cli-runs", type=int, default=5)
    args = parser.parse_args()
    load_before = load()
    with isolated_runtime("tatolab-bench-start-") as (root, env, _):
        bench = Bench(root, env)
        bench.sizes = [int(s) for s in args.sizes.split(",")]
        bench.cli_runs = args.cli_runs
        bench.measured = False
        detached = [bench.run_detached(n, run) for run, n in enumerate(bench.sizes)]
        attached = bench.attached_and_restart()
        reloads = bench.dev_reloads(args.reloads)

    ms = lambda v: f"{v:>9.0f} ms"  # noqa: E731
    print(f"bench/start.py: {os.cpu_count()} cores, load average {load_before} (before) {load()} (after)")
    for d in detached:
        print(f"run -d, {d['nodes']:>3} nodes: first bag at the last node {ms(d['first_bag_ms'])};"
              f" command returned after {d['command_ms']:.0f} ms")
    print(f"attached run, 3 nodes: first bag            {ms(attached['first_bag_ms'])}")
    print(f"dev save -> new version's first bag (median) {ms(statistics.median(reloads))}"
          f"  (all: {', '.join(f'{r:.0f}' for r in reloads)})")
    print(f"node SIGKILLed -> first bag after restart   {ms(attached['restart_first_bag_ms'])}")
    for label, value in attached["cli"].items():
        print(f"{label:<28}{value:>9.0f} ms")
    print(f"run -d said: {detached[-1]['said']!r}")
    memory = next((d["memory"] for d in detached if "memory" in d), {})
    print(f"memory with {max(bench.sizes)} nodes: {json.dumps(memory)}")
    print(json.dumps({
        "bench": "start", "cores": os.cpu_count(), "load": [load_before, load()],
        "run_d": [{"nodes": d["nodes"], "first_bag_ms": round(d["first_bag_ms"], 1),
                   "command_ms": round(d["command_ms"], 1)} for d in detached],
        "run_d_said": detached[-1]["said"],
        "attached_first_bag_ms": round(attached["first_bag_ms"], 1),
        "dev_reload_ms": round(statistics.median(reloads), 1),
        "restart_first_bag_ms": round(attached["restart_first_bag_ms"], 1),
        "cli_ms": attached["cli"],
        "memory": memory,
    }))


if __name__ == "__main__":
    main()
