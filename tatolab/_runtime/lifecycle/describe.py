"""Describing a node for a running stream: the project's own Python imports the class and checks its
config (``python -m tatolab._describe``); the runtime only reads the entry it prints."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from tatolab._control.errors import ControlError, Fix
from tatolab._graph import Node
from tatolab._model.graph import GraphProblem, check_node
from tatolab._runtime.processes import trust
from tatolab._runtime.processes.compiler import project_python
from tatolab._runtime.processes.environment import stream_env
from tatolab._runtime.processes.starter import shared as shared_starter
from tatolab._runtime.lifecycle.streams import LoadedStream

DESCRIBE_TIMEOUT_S = 60


async def describe_node(stream: LoadedStream, name: str, node_class: str, config: dict[str, Any] | None) -> Node:
    """The graph entry of node ``name`` of class ``node_class`` with ``config``, as ``stream_builder.add``
    makes it in ``stream``'s project ``.venv`` (its copy of the sources, for a kept stream), checked
    by the graph's model: that ``.venv`` may hold another version of tatolab."""
    project = stream.project
    await trust.check_async(project, None, stream.env)  # its owner may have changed since it was loaded (trust.py)
    python = project_python(project)  # or the refusal naming its .venv and the fix
    request = {"stream": stream.name, "name": name, "class": node_class, "config": config,
               "project": str(project), "sources": str(stream.sources) if stream.sources is not None else None}
    starter = stream.starter or shared_starter()
    process = await starter.start(python, "tatolab._describe", [], cwd=project, env=stream_env(stream.env))
    try:
        out, err = await asyncio.wait_for(process.communicate((json.dumps(request) + "\n").encode()),
                                          DESCRIBE_TIMEOUT_S)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        process.kill()
        await asyncio.shield(process.wait())
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise ControlError(f"importing {node_class} in {project}/.venv did not finish within {DESCRIBE_TIMEOUT_S} s; "
                           "a node module should only define the node: move long work into the node",
                           code="describe_timeout") from None
    stderr = err.decode(errors="replace")
    if re.search(r"No module named '?tatolab", stderr):
        raise ControlError(f"{project}/.venv has an older or another tatolab (no module tatolab._describe)",
                           code="no_sdk", fixes=[Fix("sdk", {"project": str(project)},
                                                     "installs this runtime's SDK there (no package index needed)")])
    try:
        answer = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ControlError(f"describing node {name} ({node_class}) in {project}/.venv failed "
                           f"(exit {process.returncode}):\n{stderr.strip()}") from None
    if "error" in answer:
        text = answer["error"]
        if answer.get("code") == "unknown_class" and stream.sources:
            text = (f"{text}; a kept stream's nodes import from the copy of {project} made when it was kept "
                    f"({stream.sources}) and from its .venv")
        elif answer.get("code") == "unknown_class":
            text = f"{text}; its nodes import from {project} and its .venv"
        raise ControlError(f"cannot add node {name} to stream {stream.name}: {text}", code=answer.get("code", "refused"),
                           details={"stream": stream.name, "node": name, "class": node_class})
    try:
        return check_node(answer["node"])
    except (GraphProblem, KeyError) as exc:
        problem = f"a graph of it {exc}" if isinstance(exc, GraphProblem) else "it has no node"
        raise ControlError(f"cannot add node {name} to stream {stream.name}: describing {node_class} in "
                           f"{project}/.venv gave an entry the runtime cannot start ({problem}): its tatolab "
                           "may be another version",
                           code="bad_entry", details={"stream": stream.name, "node": name, "class": node_class},
                           fixes=[Fix("sdk", {"project": str(project)},
                                      "installs this runtime's SDK there (no package index needed)")]) from None
