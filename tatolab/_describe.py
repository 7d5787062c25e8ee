"""``python -m tatolab._describe``: a node's entry in the graph, for a node added to a running stream.

The runtime runs this in the stream's project ``.venv`` (as it runs ``tatolab._compile``), so the
node class is imported where its process will import it, never in the runtime. It reads one JSON
line on stdin, ``{"stream", "name", "class", "config", "project", "sources"}``: ``class`` is a
built-in's name (``TestPatternSource``) or ``module:Class``. It prints one JSON object on stdout:
``{"node": <entry>}``, the entry ``stream_builder.add`` would have made (config checked against
the node's config type), or ``{"error": <message>, "code": <code>}``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from tatolab._graph import Node
from tatolab._user_code import user_code
from tatolab._errors import TatolabError


class Refused(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def builtin_names() -> list[str]:
    from tatolab._sdk import builtins

    return sorted(name for name in builtins.__all__
                  if isinstance(getattr(builtins, name), type) and builtins.implementation_of(getattr(builtins, name)))


def find_class(name: str) -> type:
    """The class ``name`` means: ``module:Class``, or a built-in's name."""
    from tatolab._classpath import load_class
    from tatolab._sdk import builtins
    from tatolab._sdk.nodes import is_node

    if ":" not in name:
        found = getattr(builtins, name, None) if name in builtin_names() else None
        if found is None:
            raise Refused(f"{name!r} is not a built-in node; the built-ins: {', '.join(builtin_names())}; "
                          "a Python node is named module:Class (nodes.detector:Detector)", "unknown_builtin")
        return found
    def raised(exc: BaseException, story: str) -> Refused:
        if isinstance(exc, (ImportError, AttributeError)):
            return Refused(f"{name} cannot be imported: {type(exc).__name__}: {exc}", "unknown_class")
        return Refused(f"importing {name} raised an error:\n{story}", "unknown_class")

    # a Tatolab error: the node's own definition is wrong (a port with no delivery profile...)
    with user_code(lambda where: Refused(f"{name}: {where}", "bad_node"), raised):
        found = load_class(name)
    if not isinstance(found, type) or not is_node(found):
        raise Refused(f"{name} is not a node class: decorate it with @node", "not_a_node")
    return found


def live_words(text: str, class_name: str) -> str:
    """The SDK's refusal of a config, for a node added live: its config comes with the request, not add()."""
    return (text.replace(f" Fix the value given to add({class_name}, config={{...}}).", " Give a config that fits.")
                .replace(", but add() was given ", ", but was given ")
                .replace(" Remove config=, or give ", " Add it with no config, or give "))


def describe(request: dict[str, Any]) -> Node:
    """The graph entry of the node ``request`` asks for (what ``stream_builder.add`` records)."""
    from tatolab._sdk.builder import StreamBuilder

    cls = find_class(str(request["class"]))
    builder = StreamBuilder(request["stream"])
    try:
        builder.add(cls, request.get("config"), name=request["name"])
    except TatolabError as exc:
        raise Refused(live_words(str(exc), cls.__name__), "bad_config") from None
    (entry,) = builder._graph()["nodes"]
    return entry


def main() -> int:
    request = json.loads(sys.stdin.readline())
    if request.get("sources"):  # import as the node host does: from a kept stream's copy, not the live files
        sys.path[:] = [p for p in sys.path if p not in ("", request["project"])]
    sys.path.insert(0, request.get("sources") or request["project"])
    # A module that prints while it is imported must not corrupt the answer: fd 1 goes to stderr meanwhile.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    saved, sys.stdout = sys.stdout, sys.stderr
    try:
        result: dict[str, Any] = {"node": describe(request)}
    except Refused as exc:
        result = {"error": str(exc), "code": exc.code}
    except Exception as exc:  # a bug here, not in the project: still answer in JSON
        result = {"error": f"tatolab._describe failed:\n{''.join(traceback.format_exception(exc))}", "code": "failed"}
    finally:
        sys.stdout = saved
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
