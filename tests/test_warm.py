"""Warm interpreters: node processes fork from one ready interpreter per project .venv, and
still get everything a process of their own gave them (project, environment, fresh code,
crashes kept to themselves); `run -d` says how long the start took."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import psutil

from harness import Runtime, make_project, read_jsonl, wait_for
from tatolab._runtime.rules import health

REPORTER = """
    import json
    import os
    import sys
    from tatolab.stream import node
    import helper


    def descriptors() -> list[str]:
        kinds = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                kinds.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return kinds


    @node(execution="manual")
    class Reporter:
        def __init__(self) -> None:
            with open("report.json", "w") as out:
                json.dump({
                    "who": helper.WHO, "var": os.environ.get("WARM_VAR"), "cwd": os.getcwd(),
                    "path0": sys.path[0], "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
                    "runtime_vars": sorted(k for k in os.environ if k.startswith("TATOLAB_")),
                    "fds": descriptors(), "argv": sys.argv,
                }, out)

        def process(self, ctx) -> None: ...
"""


def reporter_project(path: Path, venv: Path, who: str) -> Path:
    stream = f"""
        from tatolab.stream import StreamBuilder, stream
        from reporter import Reporter


        @stream
        def {who}(stream_builder: StreamBuilder) -> None:
            stream_builder.add(Reporter)
    """
    return make_project(path, venv, {"stream.py": stream, "reporter.py": REPORTER, "helper.py": f"WHO = {who!r}\n"})


def report(project: Path) -> dict:
    path = project / "report.json"
    wait_for(lambda: path.exists() and path.read_text().endswith("}"), timeout=30, what=f"{path}")
    return json.loads(path.read_text())


def test_nodes_of_two_projects_fork_from_one_warm_interpreter_yet_each_sees_its_own(runtime, project_venv,
                                                                                  tmp_path):
    alpha = reporter_project(tmp_path / "alpha", project_venv, "alpha")
    beta = reporter_project(tmp_path / "beta", project_venv, "beta")
    runs = [runtime.popen_cli("run", cwd=project, env=dict(runtime.env, WARM_VAR=f"var-{project.name}"))
            for project in (alpha, beta)]
    try:
        seen = {project.name: report(project) for project in (alpha, beta)}
        warm = runtime.warm_pids()
        assert len(warm) == 1, "one .venv: one warm interpreter"
        for name, row in seen.items():
            project = tmp_path / name
            assert row["ppid"] == warm[0], "the node was forked from the warm interpreter"
            assert row["who"] == name, "the node imported its own project's helper.py"
            assert row["var"] == f"var-{name}", "the node has the environment of the command that loaded it"
            assert row["cwd"] == str(project) and row["path0"] == str(project)
            assert row["sid"] == row["pid"], "a session of its own"
            assert row["runtime_vars"] == [], "the runtime's own variables never reach a node"
            assert row["argv"][-1] == f"{name}/reporter"
            # only its pipes and what the node host opened: no socket or pidfd of the warm interpreter
            assert not [fd for fd in row["fds"] if "socket" in fd or "pidfd" in fd], row["fds"]
            assert psutil.Process(row["pid"]).cmdline()[-3:] == ["-m", "tatolab._host", f"{name}/reporter"]
    finally:
        for run in runs:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=30)


def test_nodes_forked_warm_die_with_a_killed_runtime(project_venv, tmp_path):
    rt = Runtime(tmp_path / "rt").start()
    project = reporter_project(tmp_path / "gamma", project_venv, "gamma")
    run = rt.popen_cli("run", cwd=project)
    try:
        node = report(project)["pid"]
        warm = rt.warm_pids()
        assert warm and psutil.Process(node).ppid() == warm[0]
    finally:
        rt.stop(signal.SIGKILL)
        run.communicate(timeout=30)

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: gone(node) and all(gone(pid) for pid in warm), what="the node and its warm parent to die")
    Runtime(tmp_path / "rt").start().stop()  # the next runtime reaps what the killed one left in shared memory
    assert rt.shm_files() == []


RELOAD_FILES = {
    "stream.py": """
        from tatolab.stream import StreamBuilder, stream
        from nodes.counter import Counter
        from nodes.relay import Relay
        from nodes.sink import Sink


        @stream
        def reloading(stream_builder: StreamBuilder) -> None:
            counter = stream_builder.add(Counter)
            relay = stream_builder.add(Relay)
            sink = stream_builder.add(Sink)
            stream_builder.connect(counter.output("counts"), relay.input("numbers"))
            stream_builder.connect(relay.output("tagged"), sink.input("rows"))
    """,
    "nodes/__init__.py": "",
    "nodes/counter.py": """
        from tatolab.stream import node


        @node(execution="continuous", interval_ms=20)
        class Counter:
            @node.output()
            def counts(self) -> dict: ...

            def __init__(self) -> None:
                self.n = 0

            def process(self, ctx) -> None:
                ctx.outputs.write("counts", {"n": self.n})
                self.n += 1
    """,
    # relay -> tag -> version: version.py is imported only indirectly
    "nodes/relay.py": """
        from tatolab.stream import node
        from nodes.tag import tag


        @node
        class Relay:
            @node.input(delivery_profile="newest")
            def numbers(self) -> dict: ...

            @node.output()
            def tagged(self) -> dict: ...

            def process(self, ctx) -> None:
                bag = ctx.inputs.read("numbers")
                if bag is not None:
                    ctx.outputs.write("tagged", tag(bag))
    """,
    "nodes/tag.py": """
        import os
        from nodes import version

        MARK = "first"


        def tag(bag: dict) -> dict:
            return {**bag, "version": version.VERSION, "mark": MARK, "pid": os.getpid()}
    """,
    "nodes/version.py": "VERSION = 1\n",
    "nodes/sink.py": """
        import json
        from tatolab.stream import node


        @node
        class Sink:
            @node.input(delivery_profile="newest")
            def rows(self) -> dict: ...

            def __init__(self) -> None:
                self.out = open("seen.jsonl", "a", buffering=1)
                self.last = None

            def process(self, ctx) -> None:
                bag = ctx.inputs.read("rows")
                # a row for each change of code or of relay process (a restarted sink may first
                # read a bag the relay before it left in the ring)
                if bag is not None and (bag["version"], bag["mark"], bag["pid"]) != self.last:
                    self.last = (bag["version"], bag["mark"], bag["pid"])
                    self.out.write(json.dumps(bag) + "\\n")
    """,
}


def test_a_dev_reload_runs_the_new_code_of_every_changed_module_even_one_imported_indirectly(
        runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "reloading", project_venv, RELOAD_FILES)
    seen = project / "seen.jsonl"
    dev = runtime.popen_cli("dev", cwd=project)
    try:
        first = wait_for(lambda: [r for r in read_jsonl(seen) if r["version"] == 1], timeout=30,
                         what="the first version's bags")[0]
        assert psutil.Process(first["pid"]).ppid() in runtime.warm_pids(), "the relay was forked warm"
        # one save burst changing both modules below the node's own: the one it imports, and the one that imports
        (project / "nodes" / "version.py").write_text("VERSION = 2222\n")
        tag = project / "nodes" / "tag.py"
        tag.write_text(tag.read_text().replace('MARK = "first"', 'MARK = "second version"'))
        rows = wait_for(lambda: [r for r in read_jsonl(seen) if r["version"] != 1], timeout=30,
                        what="bags from the reloaded code")
        assert (rows[0]["version"], rows[0]["mark"]) == (2222, "second version"), rows
        assert rows[0]["pid"] != first["pid"]
        # and once more: a reload after a reload does not keep what the previous version imported
        (project / "nodes" / "version.py").write_text("VERSION = 3\n")
        rows = wait_for(lambda: [r for r in read_jsonl(seen) if r["version"] == 3], timeout=30,
                        what="bags from the third version")
        assert rows[0]["mark"] == "second version"
    finally:
        dev.send_signal(signal.SIGINT)
        dev.communicate(timeout=30)


CRASHING_FILES = {
    **RELOAD_FILES,
    "nodes/tag.py": """
        import os
        import signal

        MARK = "m"


        def tag(bag: dict) -> dict:
            if os.path.exists("crash-now"):
                os.unlink("crash-now")
                os.kill(os.getpid(), signal.SIGSEGV)  # a crash in native code, as far as anyone can tell
            return {**bag, "version": 1, "mark": str(os.getpid()), "pid": os.getpid()}
    """,
}


def node_pids_by_name(runtime: Runtime, stream: str) -> dict[str, int | None]:
    graph = json.loads(runtime.cli("graph", "--stream", stream, check=True).stdout)
    return {node["name"]: node.get("pid") for s in graph["streams"] for node in s["nodes"]}


def test_a_crash_in_one_node_leaves_its_siblings_processes_untouched(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "reloading", project_venv, CRASHING_FILES)
    seen = project / "seen.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: read_jsonl(seen), timeout=30, what="the first bags")
        before = node_pids_by_name(runtime, "reloading")
        warm = runtime.warm_pids()
        assert all(before.values()) and len(warm) == 1
        (project / "crash-now").touch()
        rows = wait_for(lambda: [r for r in read_jsonl(seen) if r["pid"] != before["relay"]], timeout=30,
                        what="bags through the restarted relay")
        after = node_pids_by_name(runtime, "reloading")
        assert after["relay"] == rows[0]["pid"] != before["relay"]
        assert (after["counter"], after["sink"]) == (before["counter"], before["sink"]), "siblings untouched"
        assert runtime.warm_pids() == warm, "the warm interpreter outlives a node's crash"
        log = read_jsonl(project / ".streamlib" / "logs" / "reloading.jsonl")
        assert any("node relay of stream reloading was killed by SIGSEGV; restarting it now" == r["message"]
                   for r in log), [r["message"] for r in log]
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=30)


def test_run_d_says_how_long_the_start_took_and_which_nodes_were_not_called_yet(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "reloading", project_venv, RELOAD_FILES)
    result = runtime.cli("run", "-d", cwd=project, check=True)
    assert result.stdout == f"reloading kept (project {project})\n", "stdout stays what the docs show"
    assert re.fullmatch(r"3 nodes running in \d+\.\d\d s\n", result.stderr), result.stderr
    runtime.cli("rm", "reloading", check=True)

    files = dict(RELOAD_FILES)
    files["stream.py"] = RELOAD_FILES["stream.py"].replace(
        'stream_builder.connect(relay.output("tagged"), sink.input("rows"))', "")
    lonely = make_project(tmp_path / "lonely", project_venv, files)
    result = runtime.cli("run", "-d", "--name", "lonely", cwd=lonely, check=True)
    assert re.fullmatch(r"2 of 3 nodes running in \d+\.\d\d s; not called yet \(no input, or still starting\): "
                        r"sink; `tatolab logs --stream lonely` says more\n", result.stderr), result.stderr
    runtime.cli("rm", "lonely", check=True)


def test_a_venv_without_warm_interpreters_starts_its_nodes_cold(runtime, project_venv, tmp_path):
    """A .venv whose tatolab cannot run tatolab._host.warm (an older release) still runs its streams."""
    old = tmp_path / "old-venv"
    (old / "bin").mkdir(parents=True)
    python = old / "bin" / "python"
    python.write_text(f'#!/bin/sh\n[ "$2" = tatolab._host.warm ] && {{ echo "No module named tatolab._host.warm" >&2; '
                      f'exit 1; }}\nexec {project_venv}/bin/python "$@"\n')
    python.chmod(0o755)
    project = reporter_project(tmp_path / "delta", None, "delta")  # type: ignore[arg-type]
    (project / ".venv").symlink_to(old, target_is_directory=True)
    run = runtime.popen_cli("run", cwd=project, env=dict(runtime.env, WARM_VAR="cold"))
    try:
        row = report(project)
        assert (row["who"], row["var"]) == ("delta", "cold")
        assert row["ppid"] == runtime.process.pid, "started cold, by the runtime itself"
        assert runtime.warm_pids() == []
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=30)


def test_a_node_restarts_at_once_the_first_time_then_backs_off():
    assert [health.restart_delay_s(n) for n in range(1, 8)] == [0.0, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
    assert health.restart_delay_s(30) == 5.0


def test_a_killed_warm_interpreter_takes_its_nodes_and_they_come_back_from_a_new_one(runtime, project_venv,
                                                                                     tmp_path):
    project = make_project(tmp_path / "reloading", project_venv, RELOAD_FILES)
    seen = project / "seen.jsonl"
    run = runtime.popen_cli("run", cwd=project)
    try:
        wait_for(lambda: read_jsonl(seen), timeout=30, what="the first bags")
        before = node_pids_by_name(runtime, "reloading")
        (warm,) = runtime.warm_pids()
        os.kill(warm, signal.SIGKILL)

        def restarted() -> dict | None:
            now = node_pids_by_name(runtime, "reloading")
            fresh = all(now.values()) and not set(now.values()) & set(before.values())
            return now if fresh and runtime.warm_pids() and runtime.warm_pids() != [warm] else None

        after = wait_for(restarted, timeout=30, what="every node back, from a new warm interpreter")
        assert all(psutil.Process(pid).ppid() == runtime.warm_pids()[0] for pid in after.values())
        count = len(read_jsonl(seen))
        wait_for(lambda: [r for r in read_jsonl(seen)[count - 1:] if r["pid"] == after["relay"]], timeout=30,
                 what="bags through the new relay")
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=30)
