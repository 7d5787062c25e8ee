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


def test_a_stop_cause_is_an_operation_and_reads_as_before():
    from tatolab._control.errors import Reason
    from tatolab._control.words import render
    from tatolab._runtime.runtime import REMOVED, REPLACED_BY_KEEP, STOPPED

    assert [render(Reason.from_wire(r.to_wire())) for r in (STOPPED, REMOVED, REPLACED_BY_KEEP)] == [
        "stopped by `tatolab stop`", "removed by `tatolab rm`", "replaced by a new `tatolab run -d`"]


def test_a_failed_record_keeps_its_fix_as_an_operation_and_reads_records_written_before(tmp_path):
    import json

    from tatolab._control.errors import Fix, Reason
    from tatolab._control.words import render
    from tatolab._runtime.lifecycle.kept import KeptStreams
    from tatolab._runtime.stored.records import KeptRecord

    kept = KeptStreams(tmp_path)
    record = KeptRecord(name="cam", project="/p", python="/p/.venv/bin/python", graph={"nodes": [], "links": []})
    kept.mark_failed(record, Reason("its project's Python environment is gone: /p/.venv/bin/python does not exist",
                                    code="no_sdk", fixes=(Fix("sdk", {"project": "/p"}, "makes it again"),)))
    saved = json.loads((tmp_path / "streams" / "cam.json").read_text())
    assert saved["failed"]["fixes"] == [{"op": "sdk", "args": {"project": "/p"}, "does": "makes it again"}]
    assert "tatolab" not in json.dumps(saved["failed"])
    [row] = kept.rows(set())
    assert render(Reason.from_wire(row["why"])) == (
        "its project's Python environment is gone: /p/.venv/bin/python does not exist; `tatolab sdk /p` makes it again")

    saved["failed"] = "an old reason, in words"  # as records written before held it
    (tmp_path / "streams" / "cam.json").write_text(json.dumps(saved))
    [row] = kept.rows(set())
    assert row["reason"] == "an old reason, in words" and "why" not in row


def test_kept_preflight_reasons_carry_their_fixes_as_operations_and_read_as_before(tmp_path):
    import asyncio
    import sys

    from tatolab._control.errors import Fix
    from tatolab._control.words import render
    from tatolab._runtime.lifecycle.kept import preflight
    from tatolab._runtime.stored.records import KeptRecord

    graph = {"nodes": [], "links": []}
    no_venv = KeptRecord(name="cam", project=str(tmp_path), python=str(tmp_path / "python"), graph=graph)
    why = asyncio.run(preflight(no_venv))
    assert why.fixes == (Fix("sdk", {"project": str(tmp_path)}, "makes it again with this runtime's SDK"),)
    assert render(why) == (f"its project's Python environment is gone: {tmp_path}/python does not exist; "
                           f"`tatolab sdk {tmp_path}` makes it again with this runtime's SDK")

    no_copy = KeptRecord(name="cam", project=str(tmp_path), python=sys.executable, graph=graph,
                         sources=str(tmp_path / "gone"))
    why = asyncio.run(preflight(no_copy))
    assert "tatolab" not in why.text and why.fixes[0].op == "load"
    assert render(why) == (f"the copy of its project's modules kept at `run -d` ({tmp_path}/gone) is gone; "
                           f"run `tatolab run -d` in {tmp_path} to keep it again")
