"""``python -m tatolab._compile``: load a project's stream, run it with a recording builder, print the graph.

The runtime runs this with the project's ``.venv/bin/python`` and cwd=PROJECT, so user code never runs
inside the runtime. Output is one JSON object on stdout: the graph (exit 0) or ``{"error": ...}`` (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from tatolab._graph import Graph
from tatolab._sdk.builder import StreamBuilder, is_stream
from tatolab._errors import ProjectError, TatolabError
from tatolab._hints import missing_module_line
from tatolab._naming import url_safe
from tatolab._sdk.nodes import is_node
from tatolab._source_imports import SourceOnlyLoader, from_source
from tatolab._user_code import user_code

GRAPH_VERSION = 1


def compile_project(
    project_dir: str | os.PathLike[str],
    *,
    target: str | None = None,
    file: str | None = None,
    name: str | None = None,
) -> Graph:
    """Load the target's ``@stream`` function, call it with a recording builder, return the graph."""
    project = Path(project_dir).resolve()
    if not project.is_dir():
        raise ProjectError(f"The project folder {str(project)!r} does not exist.")
    if str(project) not in sys.path[:1]:
        sys.path.insert(0, str(project))
    from_source(str(project))

    source, function_name, is_file = _parse_target(target, file)
    module, label = _load_file(project, source) if is_file else _load_module(source)
    function = _pick_stream(module, label, function_name)
    if is_file:
        _refuse_nodes_defined_in(module, label)

    stream_name = url_safe(name if name is not None else function.__name__)
    builder = StreamBuilder(stream_name)
    with user_code(ProjectError, lambda exc, story: ProjectError(
            f"The stream function {function.__name__!r} in {label} raised an error:\n{story}")):
        function(builder)
    for node_name, cls in builder._node_classes().items():
        _refuse_unimportable(cls, node_name, module if is_file else None, label)

    doc = function.__doc__
    return {
        "version": GRAPH_VERSION,
        "stream": stream_name,
        "function": function.__name__,
        "module": label,
        "doc": inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None,
        **builder._graph(),
    }


def _parse_target(target: str | None, file: str | None) -> tuple[str, str | None, bool]:
    """(file or module path, function name or None, is_file)."""
    if file is not None:
        return file, target, True
    if not target:
        return "stream.py", None, True
    where, sep, function = target.rpartition(":")
    if not sep:
        where, function = target, ""
    if not where:
        raise ProjectError(f"{target!r} names no file or module. Write stream.py:<name> or package.module:<name>.")
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    return where, function or None, is_file


def _load_file(project: Path, relative: str) -> tuple[types.ModuleType, str]:
    path = (project / relative).resolve()
    try:
        label = path.relative_to(project).as_posix()
    except ValueError:
        label = str(path)
    if not path.is_file():
        hint = (
            "Create it with a @stream function."
            if relative == "stream.py"
            else "Check the name, or run: tatolab run stream.py:<name>."
        )
        raise ProjectError(f"There is no {relative} in {project}. {hint}")
    # A private module name: the file is not importable by the node host, so nodes can't live in it.
    module_name = "_tatolab_stream_" + re.sub(r"\W", "_", label.removesuffix(".py"))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=SourceOnlyLoader(module_name, str(path)))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    with user_code(lambda where: ProjectError(f"{label} could not be loaded: {where}"),
                   lambda exc, story: ProjectError(f"{label} could not be loaded:\n{story}{_hint(exc, project)}")):
        spec.loader.exec_module(module)
    return module, label


def _load_module(module_path: str) -> tuple[types.ModuleType, str]:
    def raised(exc: BaseException, story: str) -> ProjectError:
        if isinstance(exc, ModuleNotFoundError) and exc.name and module_path.split(".")[0] == exc.name.split(".")[0]:
            return ProjectError(
                f"No module named {exc.name!r}. Name a stream as stream.py:<name> (a file in the project) or "
                "package.module:<name> (a module installed in the project's .venv)."
            )
        return ProjectError(f"{module_path} could not be loaded:\n{story}{_hint(exc, Path.cwd())}")

    with user_code(lambda where: ProjectError(f"{module_path} could not be loaded: {where}"), raised):
        return importlib.import_module(module_path), module_path


def _pick_stream(module: types.ModuleType, label: str, function_name: str | None) -> Any:
    found = [
        value.__name__
        for value in vars(module).values()
        if is_stream(value) and getattr(value, "__module__", None) == module.__name__
    ]
    listed = ", ".join(found) if found else "(none)"
    if function_name is not None:
        function = getattr(module, function_name, None)
        if function is None:
            raise ProjectError(f"{label} has no function {function_name!r}. Its @stream functions: {listed}.")
        if not is_stream(function):
            raise ProjectError(f"{function_name!r} in {label} is not a stream. Decorate it with @stream.")
        return function
    if not found:
        raise ProjectError(
            f"No @stream function in {label}. Add one:\n\n"
            "from tatolab.stream import StreamBuilder, stream\n\n"
            "@stream\n"
            "def my_stream(stream_builder: StreamBuilder) -> None:\n"
            "    ..."
        )
    if len(found) > 1:
        choices = " or ".join(f"{label}:{fn}" for fn in found)
        raise ProjectError(
            f"{label} has several @stream functions: {', '.join(found)}. "
            f"Name the one to run, e.g. tatolab run {choices}."
        )
    return getattr(module, found[0])


def _refuse_nodes_defined_in(module: types.ModuleType, label: str) -> None:
    for value in vars(module).values():
        if is_node(value) and value.__module__ == module.__name__:
            raise ProjectError(_move_it(value, label))


def _refuse_unimportable(cls: type, node_name: str, stream_module: types.ModuleType | None, label: str) -> None:
    if stream_module is not None and cls.__module__ == stream_module.__name__:
        raise ProjectError(_move_it(cls, label))
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise ProjectError(
            f"Node '{node_name}' ({cls.__qualname__}) cannot be imported by its own process: it is defined "
            f"{'inside a function' if '<locals>' in cls.__qualname__ else 'in __main__'}. "
            f"Move the class to the top level of a module of its own, e.g. nodes/{_snake(cls.__name__)}.py."
        )


def _move_it(cls: type, label: str) -> str:
    snake = _snake(cls.__name__)
    return (
        f"The node class {cls.__name__} is defined in {label}. Each Python node runs in its own process, "
        f"which imports its class by module path, so move it into a module of its own, "
        f"e.g. nodes/{snake}.py, and import it in {label}: from nodes.{snake} import {cls.__name__}"
    )


def _hint(exc: BaseException, project: Path) -> str:
    """A last line for a package missing from the project's .venv: which module imports it, and how to add it."""
    line = missing_module_line(exc, project)
    return f"\n{line}" if line else ""


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tatolab._compile", description=__doc__)
    parser.add_argument("--dir", default=".", help="the project folder (default: the current folder)")
    parser.add_argument("--target", help="stream.py:<name>, file.py, or package.module:<name>")
    parser.add_argument("--file", help="a file whose one @stream to load (with --target: the function's name)")
    parser.add_argument("--name", help="the stream's name (default: the function's name)")
    args = parser.parse_args(argv)

    # User code that prints must not corrupt the JSON: point fd 1 and sys.stdout at stderr
    # while it runs, and write the result on the real stdout at the end.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    saved_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        result: dict[str, Any] = dict(compile_project(args.dir, target=args.target, file=args.file, name=args.name))
        status = 0
    except TatolabError as exc:
        result, status = {"error": str(exc)}, 2
    except Exception as exc:  # a bug here, not in the project: still answer in JSON
        result, status = {"error": f"tatolab._compile failed:\n{''.join(traceback.format_exception(exc))}"}, 2
    finally:
        try:
            sys.stderr.flush()
        except Exception:
            pass
        sys.stdout = saved_stdout
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
