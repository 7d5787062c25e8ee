"""Compiling a stream: the project's own Python runs its stream function; the runtime
only reads the graph it prints. The runtime never imports user code."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, Mapping

from tatolab._graph import Graph
from tatolab._control.errors import ControlError, Fix
from tatolab._control.source import StreamSource
from tatolab._model.graph import GraphProblem, check_graph
from tatolab._runtime.processes import trust
from tatolab._runtime.processes.environment import stream_env
from tatolab._runtime.processes.starter import ProcessStarter
from tatolab._runtime.processes.starter import shared as shared_starter

COMPILE_TIMEOUT_S = 60


class CompileError(ControlError):
    """A stream that does not compile: the message holds the traceback where there is one."""

    def __init__(self, message: str, **structured: Any) -> None:
        structured.setdefault("code", "compile_failed")
        super().__init__(message, **structured)


def _sdk_fix(project: Path, does: str) -> Fix:
    return Fix("sdk", {"project": str(project)}, does)


def project_python(project: Path) -> Path:
    python = project / ".venv" / "bin" / "python"
    if not python.exists():
        raise CompileError(f"{project} has no .venv/bin/python", code="no_sdk", fixes=[
            _sdk_fix(project, "creates it with this runtime's SDK (no package index needed)")])
    return python


async def compile_stream(source: StreamSource, *, env: Mapping[str, str] | None = None,
                         starter: ProcessStarter | None = None) -> Graph:
    """The graph the project's stream function builds, run with ``env`` (the loading command's)."""
    project = source.project
    await trust.check_async(project, source, env)  # before any of its code runs (trust.py)
    python = project_python(project)
    process = await (starter or shared_starter()).start(python, "tatolab._compile", source.compile_options(),
                                                        cwd=project, env=stream_env(env), stdin=False)
    try:
        out, err = await asyncio.wait_for(process.communicate(), COMPILE_TIMEOUT_S)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise CompileError(
            f"the stream function in {project} did not return within {COMPILE_TIMEOUT_S} s; "
            "a stream function only builds the graph: move long work into a node"
        ) from None
    except asyncio.CancelledError:  # the client hung up mid-compile (dev): leave no process behind
        process.kill()
        await asyncio.shield(process.wait())
        raise
    stderr = err.decode(errors="replace")
    missing = re.search(r"No module named '?(tatolab(?:\.\w+)*)(?!\w)", stderr)
    if missing:
        what = "has no tatolab" if missing.group(1) == "tatolab" else "has an older or another tatolab"
        raise CompileError(f"{project}/.venv {what} (no module {missing.group(1)})", code="no_sdk", fixes=[
            _sdk_fix(project, "installs this runtime's SDK there (no package index needed)")])
    try:
        result = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise CompileError(
            f"compiling the stream in {project} failed (exit {process.returncode}):\n{stderr.strip()}"
        ) from None
    if isinstance(result, dict) and "error" in result:
        raise CompileError(result["error"])
    try:
        return check_graph(result)
    except GraphProblem as exc:
        name = result.get("stream") if isinstance(result, dict) else None
        stream = f"stream {name}" if isinstance(name, str) else "the stream"
        raise CompileError(
            f"{stream} in {project} compiled, but its graph {exc}; the runtime cannot start it "
            "(its .venv's tatolab may be another version than this runtime's)", code="bad_graph",
            details={"stream": name if isinstance(name, str) else None, "project": str(project)},
            fixes=[_sdk_fix(project, "installs this runtime's SDK there (no package index needed)")]) from None
