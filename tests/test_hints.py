"""A package missing from a project's .venv gets one line saying which module imports it, the
.venv it is missing from, and both ways to add it (uv and plain pip)."""

from __future__ import annotations

import sys

from harness import make_project as make_runtime_project, read_jsonl, wait_for
from tatolab._hints import install_hint, missing_module_line
from test_compile import compile_error, make_project

MISSING = "tatolab_test_not_installed"


def test_install_hints_give_uv_and_pip():
    assert install_hint("numpy", "soxr") == (
        "`uv add numpy soxr` in the project, or `.venv/bin/pip install numpy soxr` there")


def test_a_module_that_is_the_projects_own_or_tatolab_gets_no_install_hint(tmp_path):
    (tmp_path / "helpers.py").write_text("")
    for name in ("helpers", "tatolab._gone"):
        assert missing_module_line(ModuleNotFoundError(f"No module named {name!r}", name=name), tmp_path) is None
    assert missing_module_line(KeyError("x"), tmp_path) is None


def test_a_node_module_importing_a_missing_package_says_which_venv_and_how_to_add_it(tmp_path):
    project = make_project(tmp_path, {
        "nodes/vision.py": "import os\nimport cv2\n",
        "stream.py": """
            from tatolab.stream import StreamBuilder, stream
            from nodes import vision


            @stream
            def s(stream_builder: StreamBuilder) -> None:
                pass
        """,
    })
    error = compile_error(project)
    assert "ModuleNotFoundError: No module named 'cv2'" in error  # the traceback stays
    assert error.splitlines()[-1] == (
        f"nodes/vision.py, line 2 imports cv2, which is not installed in {sys.prefix} (the package opencv-python "
        f"provides cv2): `uv add opencv-python` in {project.resolve()}, or `{sys.prefix}/bin/pip install opencv-python`")


LATE = f'''
    from tatolab.stream import node


    @node(execution="continuous", interval_ms=50)
    class Late:
        @node.output()
        def out(self) -> dict: ...

        def process(self, ctx) -> None:
            import {MISSING}
'''


def test_a_node_that_imports_a_missing_package_late_says_so_in_one_line(runtime, project_venv, tmp_path):
    project = make_runtime_project(tmp_path / "late", project_venv, {
        "stream.py": """
            from tatolab.stream import StreamBuilder, stream
            from nodes.late import Late


            @stream
            def late(stream_builder: StreamBuilder) -> None:
                stream_builder.add(Late)
        """,
        "nodes/__init__.py": "",
        "nodes/late.py": LATE,
    })
    runtime.cli("run", "-d", cwd=project)
    log = project / ".streamlib" / "logs" / "late.jsonl"
    said = wait_for(lambda: [r["message"] for r in read_jsonl(log) if MISSING in r.get("message", "")],
                    timeout=60, what="the node's error")
    # (a kept stream's nodes import the kept copy of nodes/late.py: named as the project's file)
    assert said[0] == (
        f"node late raised ModuleNotFoundError: No module named '{MISSING}'; nodes/late.py, line 10 imports "
        f"{MISSING}, which is not installed in {project / '.venv'}: `uv add {MISSING}` in {project.resolve()}, or "
        f"`.venv/bin/pip install {MISSING}`"), said[0]
    runtime.cli("rm", "late", check=True)
