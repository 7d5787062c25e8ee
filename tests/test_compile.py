"""``python -m tatolab._compile`` on small projects written into a temporary folder."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

NODES = '''
from dataclasses import dataclass

from tatolab.stream import RuntimeContextLimitedAccess, node


@dataclass
class TemperatureAlarmConfig:
    threshold_celsius: float = 60.0


@node
class TemperatureAlarm:
    """Sends an alarm for each reading above the threshold."""

    @node.input(delivery_profile="ordered")
    def readings(self) -> dict: ...

    @node.output()
    def alarms(self) -> dict: ...

    def __init__(self, config: TemperatureAlarmConfig) -> None:
        self.threshold_celsius = config.threshold_celsius

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        reading = ctx.inputs.read("readings")
        if reading is not None and reading["celsius"] > self.threshold_celsius:
            ctx.outputs.write("alarms", {"sensor": reading["sensor"], "celsius": reading["celsius"]})


@node(execution="continuous", interval_ms=100)
class Thermometer:
    @node.output()
    def readings(self) -> dict: ...

    def process(self, ctx: RuntimeContextLimitedAccess) -> None:
        ctx.outputs.write("readings", {"sensor": "kitchen", "celsius": 21.5})
'''

HEADER = '''
from tatolab.stream import Exposure, StreamBuilder, stream
from nodes.temperature_alarm import TemperatureAlarm, Thermometer
'''


def with_header(text: str) -> str:
    return HEADER + textwrap.dedent(text)


def make_project(root: Path, files: dict[str, str]) -> Path:
    files = {"nodes/__init__.py": "", "nodes/temperature_alarm.py": NODES, **files}
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def compile_(project: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tatolab._compile", "--dir", str(project), *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"stdout must be one JSON line, got {done.stdout!r} (stderr: {done.stderr})"
    return done.returncode, json.loads(lines[0]), done.stderr


def compile_error(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    status, result, _ = compile_(project, *args, env=env)
    assert status == 2 and set(result) == {"error"}, result
    return result["error"]


def test_docs_example_compiles_to_the_graph(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": with_header(
                '''
            print("user code may print")

            @stream
            def kitchen_watch(stream_builder: StreamBuilder) -> None:
                """Alarms when the kitchen runs hot."""
                thermometer = stream_builder.add(Thermometer, name="Thermomètre Cuisine")
                alarm = stream_builder.add(TemperatureAlarm, config={"threshold_celsius": 50})
                stream_builder.connect(thermometer.output("readings"), alarm.input("readings"))
                stream_builder.connect(
                    stream_builder.remote_output("motion_watcher/detector/motion"), alarm.input("readings")
                )
                stream_builder.expose(alarm.output("alarms"))
                stream_builder.expose(thermometer.output("readings"), Exposure.PUBLIC)
            '''
            )
        },
    )
    status, graph, stderr = compile_(project)
    assert status == 0
    assert "user code may print" in stderr
    assert graph == {
        "version": 1,
        "stream": "kitchen_watch",
        "function": "kitchen_watch",
        "module": "stream.py",
        "doc": "Alarms when the kitchen runs hot.",
        "nodes": [
            {
                "name": "thermometre-cuisine",
                "class": "nodes.temperature_alarm:Thermometer",
                "doc": None,
                "config": None,
                "execution": "continuous",
                "interval_ms": 100,
                "inputs": [],
                "outputs": [{"port": "readings"}],
            },
            {
                "name": "temperaturealarm",
                "class": "nodes.temperature_alarm:TemperatureAlarm",
                "doc": "Sends an alarm for each reading above the threshold.",
                "config": {"threshold_celsius": 50},
                "execution": "reactive",
                "interval_ms": None,
                "inputs": [{"port": "readings", "delivery_profile": "ordered"}],
                "outputs": [{"port": "alarms"}],
            },
        ],
        "links": [
            {
                "from": {"node": "thermometre-cuisine", "port": "readings"},
                "to": {"node": "temperaturealarm", "port": "readings"},
            },
            {
                "from": {"address": "motion_watcher/detector/motion"},
                "to": {"node": "temperaturealarm", "port": "readings"},
            },
        ],
        "exposures": [
            {"node": "temperaturealarm", "port": "alarms", "level": "private"},
            {"node": "thermometre-cuisine", "port": "readings", "level": "public"},
        ],
    }


def test_print_to_file_descriptor_one_does_not_corrupt_the_json(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": with_header(
                '''
            import os
            os.write(1, b"raw fd write\\n")

            @stream
            def s(stream_builder: StreamBuilder) -> None:
                stream_builder.add(Thermometer)
            '''
            )
        },
    )
    status, graph, stderr = compile_(project)
    assert status == 0 and graph["stream"] == "s" and "raw fd write" in stderr


TWO_STREAMS = HEADER + '''
@stream
def recorder(stream_builder: StreamBuilder) -> None:
    stream_builder.add(Thermometer)

@stream
def Alarm_Only(stream_builder: StreamBuilder) -> None:
    stream_builder.add(TemperatureAlarm)
'''


def test_several_streams_without_a_target_are_listed_with_how_to_pick(tmp_path):
    project = make_project(tmp_path, {"stream.py": TWO_STREAMS})
    assert compile_error(project) == (
        "stream.py has several @stream functions: recorder, Alarm_Only. Name the one to run, "
        "e.g. tatolab run stream.py:recorder or stream.py:Alarm_Only."
    )


def test_targets_pick_a_function_a_file_or_a_name(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": TWO_STREAMS,
            "cameras.py": with_header(
                '''
            @stream
            def front_door(stream_builder: StreamBuilder) -> None:
                stream_builder.add(Thermometer, name="door")
            '''
            ),
        },
    )
    status, graph, _ = compile_(project, "--target", "stream.py:Alarm_Only")
    assert status == 0 and graph["stream"] == "alarm_only" and graph["function"] == "Alarm_Only"
    status, graph, _ = compile_(project, "--target", "stream.py:recorder", "--name", "Mon Enregistreur")
    assert status == 0 and graph["stream"] == "mon-enregistreur"
    status, graph, _ = compile_(project, "--target", "cameras.py:front_door")
    assert (status, graph["module"], graph["nodes"][0]["name"]) == (0, "cameras.py", "door")
    status, graph, _ = compile_(project, "--file", "cameras.py")
    assert (status, graph["function"]) == (0, "front_door")
    assert compile_error(project, "--target", "stream.py:nope") == (
        "stream.py has no function 'nope'. Its @stream functions: recorder, Alarm_Only."
    )


def test_module_path_target_imports_an_installed_package(tmp_path):
    site = tmp_path / "site"
    make_project(
        site,
        {
            "acme_streams/__init__.py": "",
            "acme_streams/rover.py": with_header(
                '''
            @stream
            def camera_rig(stream_builder: StreamBuilder) -> None:
                stream_builder.add(Thermometer)
            '''
            ),
        },
    )
    project = tmp_path / "project"
    project.mkdir()
    env = {"PYTHONPATH": str(site)}
    status, graph, _ = compile_(project, "--target", "acme_streams.rover:camera_rig", env=env)
    assert (status, graph["module"], graph["stream"]) == (0, "acme_streams.rover", "camera_rig")
    assert "No module named 'acme_missing'" in compile_error(project, "--target", "acme_missing.x:y", env=env)


def test_syntax_error_shows_the_traceback_with_file_and_line(tmp_path):
    project = make_project(tmp_path, {"stream.py": "from tatolab.stream import stream\n\n@stream\ndef s(b)\n    pass\n"})
    error = compile_error(project)
    assert error.startswith("stream.py could not be loaded:\n")
    assert "stream.py\", line 4" in error and "SyntaxError" in error


def test_exception_while_loading_shows_the_users_frames_only(tmp_path):
    project = make_project(
        tmp_path,
        {"stream.py": "import json\n\nvalue = json.loads('{}')['missing']\n"},
    )
    error = compile_error(project)
    assert "stream.py\", line 3, in <module>" in error and "KeyError: 'missing'" in error
    assert "_compile.py" not in error and "importlib" not in error


def test_exception_in_the_stream_function_shows_its_traceback(tmp_path):
    project = make_project(
        tmp_path,
        {"stream.py": HEADER + "\n@stream\ndef s(stream_builder):\n    raise RuntimeError('camera not found')\n"},
    )
    error = compile_error(project)
    assert error.startswith("The stream function 's' in stream.py raised an error:\nTraceback")
    assert "line 7, in s" in error and "RuntimeError: camera not found" in error


def test_no_stream_function(tmp_path):
    project = make_project(tmp_path, {"stream.py": HEADER})
    assert compile_error(project).startswith("No @stream function in stream.py. Add one:")


def test_missing_stream_file(tmp_path):
    assert compile_error(tmp_path).startswith("There is no stream.py in ")


def test_node_defined_in_stream_py_is_refused(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": '''
            from tatolab.stream import StreamBuilder, node, stream

            @node
            class MotionDetector:
                @node.input(delivery_profile="newest")
                def frames(self) -> dict: ...

                def process(self, ctx): ...

            @stream
            def s(stream_builder: StreamBuilder) -> None:
                stream_builder.add(MotionDetector)
            '''
        },
    )
    assert compile_error(project) == (
        "The node class MotionDetector is defined in stream.py. Each Python node runs in its own process, "
        "which imports its class by module path, so move it into a module of its own, e.g. "
        "nodes/motion_detector.py, and import it in stream.py: from nodes.motion_detector import MotionDetector"
    )


def test_unknown_port_names_the_ports_and_the_line(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": with_header(
                '''
            @stream
            def s(stream_builder: StreamBuilder) -> None:
                alarm = stream_builder.add(TemperatureAlarm, name="alarm")
                stream_builder.expose(alarm.output("alarm"))
            '''
            )
        },
    )
    error = compile_error(project)
    assert error.startswith(
        "Node 'alarm' (TemperatureAlarm) in stream 's' has no output named 'alarm'. "
        "Its outputs: alarms. Its inputs: readings.\n  (at "
    )
    assert error.endswith("stream.py, line 8: stream_builder.expose(alarm.output(\"alarm\")))")


def test_bad_config_names_node_field_and_type(tmp_path):
    project = make_project(
        tmp_path,
        {
            "stream.py": with_header(
                '''
            @stream
            def s(stream_builder: StreamBuilder) -> None:
                stream_builder.add(TemperatureAlarm, config={"threshold_celsius": "hot"})
            '''
            )
        },
    )
    error = compile_error(project)
    assert error.startswith(
        "Node 'temperaturealarm' (TemperatureAlarm): the config does not fit TemperatureAlarmConfig: "
        "field `threshold_celsius`: expected `float`, got `str`."
    )


def test_input_without_delivery_profile_in_a_node_module(tmp_path):
    project = make_project(
        tmp_path,
        {
            "nodes/detector.py": '''
            from tatolab.stream import node

            @node
            class Detector:
                @node.input()
                def frames(self) -> dict: ...

                def process(self, ctx): ...
            ''',
            "stream.py": "from tatolab.stream import stream\nfrom nodes.detector import Detector\n",
        },
    )
    error = compile_error(project)
    assert error.startswith("stream.py could not be loaded: Node Detector: input 'frames' has no delivery profile.")
    assert "detector.py, line 4: @node" in error


OLDER_SDK = '''
from tatolab._sdk import builder

made = builder.StreamBuilder._graph


def older(self):  # the graph as another version of tatolab writes it: nodes without their outputs
    graph = made(self)
    for entry in graph["nodes"]:
        del entry["outputs"]
    return graph


builder.StreamBuilder._graph = older
'''


def test_the_runtime_checks_a_compiled_graph_and_names_the_stream(tmp_path):
    """A graph the model refuses, from the project's own compile, is a compile error naming the
    stream, what is wrong and the fix, not a stream that fails to start."""
    from tatolab._control.source import StreamSource
    from tatolab._runtime.processes.compiler import CompileError, compile_stream
    from tatolab._runtime.processes.starter import ColdStarter

    project = make_project(tmp_path / "older", {"stream.py": OLDER_SDK + with_header('''
        @stream
        def kitchen(stream_builder: StreamBuilder) -> None:
            stream_builder.add(Thermometer)
    ''')})
    python = project / ".venv" / "bin" / "python"  # the project's .venv: this interpreter, with its tatolab
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    with pytest.raises(CompileError) as raised:
        asyncio.run(compile_stream(StreamSource.of(project), starter=ColdStarter()))
    assert str(raised.value).startswith(
        f"stream kitchen in {project} compiled, but its graph gives node thermometer no list of outputs; ")
    assert raised.value.code == "bad_graph"
    assert [fix.op for fix in raised.value.fixes] == ["sdk"]
