"""Compiling a stream: the project's own Python runs its stream function; the runtime
only reads the graph it prints. The runtime never imports user code."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, Mapping

from tatolab._runtime.environment import stream_env
from tatolab._runtime.starter import ProcessStarter
from tatolab._runtime.starter import shared as shared_starter

COMPILE_TIMEOUT_S = 60


class CompileError(Exception):
    pass


def project_python(project: Path) -> Path:
    python = project / ".venv" / "bin" / "python"
    if not python.exists():
        raise CompileError(f"{project} has no .venv/bin/python; `tatolab sdk {project}` creates it with "
                           "this runtime's SDK (no package index needed)")
    return python


async def compile_stream(
    project: Path,
    *,
    target: str | None = None,
    file: str | None = None,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    starter: ProcessStarter | None = None,
) -> dict[str, Any]:
    """The graph the project's stream function builds, run with ``env`` (the loading command's)."""
    python = project_python(project)
    # "--opt=value": a value starting with "-" (`--name=-x`) is never read as an option
    args = [f"--dir={project}"]
    if target:
        args.append(f"--target={target}")
    if file:
        args.append(f"--file={file}")
    if name:
        args.append(f"--name={name}")
    process = await (starter or shared_starter()).start(python, "tatolab._compile", args, cwd=project, env=stream_env(env),
                                           stdin=False)
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
        raise CompileError(
            f"{project}/.venv {what} (no module {missing.group(1)}); `tatolab sdk {project}` installs "
            "this runtime's SDK there (no package index needed)"
        )
    try:
        result = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise CompileError(
            f"compiling the stream in {project} failed (exit {process.returncode}):\n{stderr.strip()}"
        ) from None
    if "error" in result:
        raise CompileError(result["error"])
    return result
