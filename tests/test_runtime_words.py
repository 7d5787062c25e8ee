"""The runtime never writes CLI syntax: a fix or a cause is an operation with arguments
(tatolab/_control/errors.py), and tatolab/_control/words.py is the one place that words it as
a command. Docstrings and comments may name commands; the strings the runtime says may not."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tatolab"
ROOMS = ("_runtime", "_host")
CLI_SYNTAX = ("`tatolab ", " --", "`run ", "tatolab run -d", "--dir")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def said_with_cli_syntax() -> list[str]:
    found = []
    for room in ROOMS:
        for path in sorted((PACKAGE / room).rglob("*.py")):
            tree = ast.parse(path.read_text())
            skip = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                    if any(syntax in node.value for syntax in CLI_SYNTAX):
                        found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_no_runtime_module_writes_cli_syntax_into_what_it_says():
    assert said_with_cli_syntax() == []
