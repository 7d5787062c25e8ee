"""Bad projects get clear errors from `tatolab run`, and nothing else running is disturbed."""

from __future__ import annotations

import signal
import venv
from pathlib import Path

import pytest

from harness import make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, PASS_THROUGH, pipeline_files

GOOD_NODE_MODULES = {"nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/doubler.py": PASS_THROUGH}

CASES = {
    "syntax_error": (
        {"stream.py": "from tatolab.stream import stream\n\n@stream\ndef broken(stream_builder)\n    pass\n"},
        ["SyntaxError", "stream.py", "line 4"],
    ),
    "exception_in_stream_function": (
        {"stream.py": """
            from tatolab.stream import stream

            @stream
            def boom(stream_builder):
                raise RuntimeError("the camera list is empty")
        """},
        ["RuntimeError: the camera list is empty", "Traceback"],
    ),
    "no_stream": ({"stream.py": "x = 1\n"}, ["@stream"]),
    "two_streams_without_target": (
        {"stream.py": """
            from tatolab.stream import stream

            @stream
            def one(stream_builder): ...

            @stream
            def two(stream_builder): ...
        """},
        ["one", "two", "stream.py:"],
    ),
    "node_in_stream_py": (
        {"stream.py": """
            from tatolab.stream import node, stream

            @node(execution="continuous", interval_ms=10)
            class Local:
                @node.output()
                def out(self) -> dict: ...

                def process(self, ctx): ...

            @stream
            def inline(stream_builder):
                stream_builder.add(Local)
        """},
        ["Local", "module of its own"],
    ),
    "unknown_port": (
        {"stream.py": """
            from tatolab.stream import stream
            from nodes.counter import Counter
            from nodes.doubler import Doubler

            @stream
            def wrong_port(stream_builder):
                counter = stream_builder.add(Counter)
                doubler = stream_builder.add(Doubler)
                stream_builder.connect(counter.output("count"), doubler.input("numbers"))
        """, **GOOD_NODE_MODULES},
        ["counter", "'count'", "counts"],
    ),
    "input_without_profile": (
        {"stream.py": """
            from tatolab.stream import stream
            from nodes.bad import NoProfile

            @stream
            def no_profile(stream_builder):
                stream_builder.add(NoProfile)
        """, "nodes/__init__.py": "", "nodes/bad.py": """
            from tatolab.stream import node

            @node
            class NoProfile:
                @node.input()
                def frames(self) -> dict: ...

                def process(self, ctx): ...
        """},
        ["frames", "delivery_profile", "newest", "ordered"],
    ),
    "config_does_not_fit": (
        {"stream.py": """
            from tatolab.stream import stream
            from nodes.counter import Counter

            @stream
            def bad_config(stream_builder):
                stream_builder.add(Counter, config={"limit": "many"})
        """, **GOOD_NODE_MODULES},
        ["counter", "limit", "int"],
    ),
}


@pytest.fixture
def good_stream(runtime, project_venv, tmp_path):
    project = make_project(tmp_path / "good", project_venv, pipeline_files())
    run = runtime.popen_cli("run", cwd=project)
    wait_for(lambda: read_jsonl(project / "out.jsonl"), timeout=30, what="the good stream's first bag")
    yield project
    run.send_signal(signal.SIGINT)
    run.communicate(timeout=20)


def _still_running(project: Path) -> None:
    count = len(read_jsonl(project / "out.jsonl"))
    wait_for(lambda: len(read_jsonl(project / "out.jsonl")) > count + 5, what="the good stream to keep producing")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_project_gets_its_message(case, runtime, project_venv, tmp_path, good_stream):
    files, expected = CASES[case]
    project = make_project(tmp_path / case, project_venv, files)
    result = runtime.cli("run", cwd=project)
    assert result.returncode == 1
    for text in expected:
        assert text in result.stderr, f"{text!r} missing from:\n{result.stderr}"
    assert runtime.stream_names() == ["pipeline"]
    _still_running(good_stream)


@pytest.mark.slow
def test_project_without_venv(runtime, tmp_path, good_stream):
    project = make_project(tmp_path / "novenv", None, {"stream.py": "x = 1\n"})
    result = runtime.cli("run", cwd=project)
    assert result.returncode == 1
    assert f"{project} has no .venv/bin/python; `tatolab sdk {project}` creates it" in result.stderr
    _still_running(good_stream)


@pytest.mark.slow
def test_venv_without_tatolab(runtime, tmp_path, good_stream):
    project = make_project(tmp_path / "bare", None, pipeline_files())
    venv.EnvBuilder(with_pip=False).create(project / ".venv")
    result = runtime.cli("run", cwd=project)
    assert result.returncode == 1
    assert f"{project}/.venv has no tatolab (no module tatolab)" in result.stderr
    assert f"`tatolab sdk {project}` installs this runtime's SDK there" in result.stderr
    _still_running(good_stream)
