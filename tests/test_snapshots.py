"""What `run -d` keeps of a project: its Python sources copied, the rest linked, tools' folders left out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tatolab._control.errors import Fix
from tatolab._control.words import render
from tatolab._runtime.stored import snapshots


def tree(root: Path, files: list[str]) -> Path:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return root


def test_sources_are_copied_data_beside_them_linked_and_tools_folders_left_out(tmp_path: Path):
    project = tree(tmp_path / "p", [
        "stream.py", "nodes/__init__.py", "nodes/detector.py", "nodes/model.onnx", "nodes/deep/more.py",
        "data/frames/0001.png", "README.md", ".venv/lib/site.py", ".git/hooks/x.py", ".streamlib/logs/a.py",
        "nodes/__pycache__/detector.cpython-311.pyc", "other-env/pyvenv.cfg", "other-env/lib/y.py",
    ])
    sources, links = snapshots.plan(project)
    assert [str(p) for p in sources] == ["stream.py", "nodes/__init__.py", "nodes/detector.py", "nodes/deep/more.py"]
    assert sorted(str(p) for p in links) == ["README.md", "data", "nodes/model.onnx"]

    version = snapshots.take(project, tmp_path / "state" / "sources", ".cam")
    (project / "nodes" / "detector.py").write_text("edited")
    assert (version / "nodes" / "detector.py").read_text() == "nodes/detector.py"  # a copy, not the live file
    assert (version / "data").resolve() == project / "data" and (version / "nodes" / "model.onnx").is_symlink()
    assert oct(os.stat(version / "stream.py").st_mode & 0o777) == oct(0o600)

    newer = snapshots.take(project, tmp_path / "state" / "sources", ".cam")
    snapshots.prune(tmp_path / "state" / "sources", {".cam": str(newer)}, only=".cam")
    assert not version.exists() and (newer / "nodes" / "detector.py").read_text() == "edited"
    snapshots.forget(tmp_path / "state" / "sources", ".cam")
    assert list((tmp_path / "state" / "sources").iterdir()) == []


def test_a_folder_that_is_not_a_project_is_refused_with_the_fix(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(snapshots, "MAX_FILES", 3)
    project = tree(tmp_path / "home", [f"m{i}.py" for i in range(5)])
    with pytest.raises(snapshots.SnapshotError) as refused:
        snapshots.take(project, tmp_path / "sources", "x")
    assert refused.value.reason.fixes == (Fix("load", {"project": None}, "at the folder with stream.py"),)
    assert render(refused.value.reason) == (
        f"{project} holds more than 3 Python files outside hidden folders, too many to keep a copy of for `run -d`; "
        "is it the project folder? Point --dir at the folder with stream.py")
    assert list((tmp_path / "sources" / "x").iterdir()) == []  # nothing half-copied stays
