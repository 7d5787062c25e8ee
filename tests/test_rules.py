"""The runtime's decisions need no runtime: each is a plain function over plain values."""

from __future__ import annotations

import ast
from pathlib import Path

from tatolab._cli.errors import render
from tatolab._runtime.rules import names
from tatolab._runtime.rules.names import Loaded, Recorded

RULES = Path(__file__).resolve().parent.parent / "tatolab" / "_runtime" / "rules"
IO_MODULES = {"os", "socket", "subprocess", "asyncio", "shutil", "psutil", "watchfiles", "tempfile", "io"}


def test_the_rules_import_no_process_socket_or_file_machinery():
    for path in RULES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                found = {(node.module or "").split(".")[0]}
                assert not (node.module or "").startswith("tatolab._runtime") or \
                    (node.module or "").startswith("tatolab._runtime.rules"), f"{path.name} imports {node.module}"
            else:
                continue
            assert not found & IO_MODULES, f"{path.name} imports {found & IO_MODULES}"


def test_a_kept_record_holds_its_name_except_for_run_d_from_its_own_project():
    record = Recorded(project="/p", state="stopped")
    refused = names.refusal("cam", record=record, loaded=None)
    assert refused is not None and refused.code == "name_kept"
    assert render(refused) == (
        "a stream named cam is kept from /p (stopped); a kept stream holds its name even while stopped: "
        "remove it first with `tatolab rm cam`, or load this one under another name with --name")
    assert names.refusal("cam", record=record, loaded=None, keeping_from="/p") is None
    assert names.refusal("cam", record=record, loaded=None, keeping_from="/q") is not None
    damaged = Recorded(project="/q", state="failed", damaged=True)
    assert names.refusal("cam", record=damaged, loaded=None, keeping_from="/p") is None


def test_a_loaded_stream_holds_its_name():
    assert names.refusal("cam", record=None, loaded=None) is None
    attached = names.refusal("cam", record=None, loaded=Loaded(project="/p", mode="attached"))
    assert attached is not None and render(attached) == (
        "a stream named cam is already loaded from /p (attached); stop it with `tatolab stop cam`, "
        "or load this one under another name with --name")
    kept = names.refusal("cam", record=None, loaded=Loaded(project="/p", mode="kept"))
    assert kept is not None and kept.code == "name_kept" and "tatolab" not in kept.message

