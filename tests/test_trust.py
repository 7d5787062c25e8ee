"""Another user's project never runs as you unless you trust it (git's "dubious ownership"): its
folder, stream file, modules or .venv owned by another user, or writable by others, are refused
before any of its code runs, for run, run -d, dev, MCP, a module target and a kept stream's restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import Runtime, make_project, wait_for
from nodes_fixture import pipeline_files
from other_user import OtherUser
from tatolab._control.errors import ControlError
from tatolab._control.source import StreamSource
from tatolab._control.words import render
from tatolab._runtime.processes import trust

TOUCHED = "touched.txt"
# a stream function that leaves a mark if it ever runs
STREAM = f"""
from pathlib import Path
from tatolab.stream import StreamBuilder, stream

Path({TOUCHED!r}).write_text("ran")


@stream
def theirs(stream_builder: StreamBuilder) -> None:
    pass
"""


def chown_tree(path: Path, user: OtherUser) -> None:
    for root, folders, files in os.walk(path):
        for name in [root, *(os.path.join(root, f) for f in folders + files)]:
            os.lchown(name, user.uid, user.gid)


def test_a_project_of_another_user_is_refused_naming_the_owner_and_the_fixes(other_user: OtherUser, tmp_path: Path):
    project = make_project(tmp_path / "theirs", None, {"stream.py": STREAM})
    chown_tree(project, other_user)
    owner = f"{other_user.name} (uid {other_user.uid})"
    with pytest.raises(ControlError) as refused:
        trust.check(project)
    said = render(refused.value)
    assert said.startswith(f"{project} belongs to {owner}, so Tatolab will not run {project} as you (its code "
                           "would run with your rights). If it is yours: `chown -R root ")
    assert said.endswith(f"If you trust it as it is: TATOLAB_TRUST={project} in the command's environment, or for "
                         f"good with `tatolab trust {project}`")
    trust.check(project, env={"TATOLAB_TRUST": str(tmp_path)})  # a folder above it, trusted: fine
    trust.check(project, env={"TATOLAB_TRUST": "*"})


def test_each_part_that_runs_is_checked_and_others_may_not_write_to_it(other_user: OtherUser, tmp_path: Path):
    project = make_project(tmp_path / "mine", None, {"stream.py": STREAM, "pkg/__init__.py": "",
                                                     "pkg/streams.py": STREAM})
    (project / ".venv" / "bin").mkdir(parents=True)
    trust.check(project)
    trust.check(project, StreamSource.of(project, "pkg.streams:theirs"))
    os.chown(project / "pkg" / "streams.py", other_user.uid, other_user.gid)
    with pytest.raises(ControlError, match=f"{project / 'pkg' / 'streams.py'} belongs to {other_user.name}"):
        trust.check(project, StreamSource.of(project, "pkg.streams:theirs"))  # a module target through their file
    with pytest.raises(ControlError, match=f"{project / 'pkg' / 'streams.py'} belongs to {other_user.name}"):
        trust.check(project)  # stream.py is the user's, but pkg/streams.py can be imported from it
    os.chown(project / "pkg" / "streams.py", 0, 0)
    os.chown(project / ".venv", other_user.uid, other_user.gid)
    with pytest.raises(ControlError, match=f"{project / '.venv'} belongs to {other_user.name}"):
        trust.check(project)
    os.chown(project / ".venv", 0, 0)
    project.chmod(0o777)
    with pytest.raises(ControlError, match=rf"{project} can be written by every user \(mode 777\), so Tatolab"):
        trust.check(project)
    with pytest.raises(ControlError) as refused:
        trust.check(project)
    assert f"`chmod -R go-w {project}`" in render(refused.value)


def test_run_d_dev_and_a_kept_restart_refuse_another_users_project(other_user: OtherUser, tmp_path: Path,
                                                                   project_venv: Path):
    rt = Runtime(tmp_path / "rt").start()
    try:
        theirs = make_project(tmp_path / "theirs", project_venv, {"stream.py": STREAM})
        chown_tree(theirs, other_user)
        for args in (["run", "-d"], ["run"], ["dev"]):
            refused = rt.cli(*args, cwd=theirs)
            assert refused.returncode == 1, refused.stderr
            assert f"error: {theirs} belongs to {other_user.name} (uid {other_user.uid})" in refused.stderr
            assert "Traceback" not in refused.stderr
        assert not (theirs / TOUCHED).exists(), "the other user's stream function ran"
        assert "theirs" not in rt.cli("streams", check=True).stdout

        # trusted explicitly, it runs; taken off the list, a kept stream is refused at the next start
        kept = make_project(tmp_path / "kept", project_venv, pipeline_files())
        chown_tree(kept, other_user)
        assert rt.cli("trust", str(kept), check=True).stdout.strip() == f"{kept} is trusted to run as you"
        rt.cli("run", "-d", cwd=kept, check=True)
        assert rt.cli("trust", check=True).stdout.strip() == str(kept)
        rt.cli("trust", "--remove", str(kept), check=True)
        rt.stop()
        rt.start()
        wait_for(lambda: _state(rt, "pipeline") == "failed", timeout=30, what="the kept stream to be refused")
        listing = rt.cli("streams", check=True).stdout
        assert "pipeline" in listing and "failed" in listing
        why = rt.cli("start", "pipeline")
        assert why.returncode == 1
        assert f"{kept} belongs to {other_user.name}" in why.stderr, why.stderr
        log = (tmp_path / "rt" / "state" / "tatolab" / "runtime.jsonl").read_text()
        assert f"kept stream pipeline cannot be loaded and is marked failed: {kept} belongs to {other_user.name}" in log
        rt.cli("rm", "pipeline", check=True)
    finally:
        rt.stop()


def _state(rt: Runtime, name: str) -> str | None:
    rows = [line.split() for line in rt.cli("streams", check=True).stdout.splitlines()]
    return next((row[1] for row in rows if row and row[0] == name), None)


# -- the project's .streamlib ---------------------------------------------------------------------


def test_a_streamlib_link_planted_in_a_project_is_refused_and_its_target_untouched(other_user: OtherUser,
                                                                                   tmp_path: Path):
    from tatolab._runtime.stored.logs import StreamLog
    from tatolab._safe_fs import UnsafePath

    target = tmp_path / "elsewhere"
    target.mkdir()
    project = make_project(tmp_path / "p", None, {"stream.py": STREAM})
    (project / ".streamlib").symlink_to(target)
    os.lchown(project / ".streamlib", other_user.uid, other_user.gid)
    with pytest.raises(UnsafePath) as refused:
        StreamLog("s", project)
    assert str(refused.value).startswith(f"{project / '.streamlib'} is a symbolic link to {target} owned by "
                                         f"{other_user.name}")
    assert list(target.iterdir()) == []  # no logs folder, no file made through the link
    (project / ".streamlib").unlink()
    (project / ".streamlib" / "logs").mkdir(parents=True)  # a real folder now, its logs folder another user's
    os.chown(project / ".streamlib" / "logs", other_user.uid, other_user.gid)
    with pytest.raises(UnsafePath, match=f"logs is a folder owned by {other_user.name}"):
        StreamLog("s", project)
    os.chown(project / ".streamlib" / "logs", 0, 0)
    log = StreamLog("s", project)
    log.emit({"message": "hello"})
    log.file.close()
    assert "hello" in (project / ".streamlib" / "logs" / "s.jsonl").read_text()
    assert oct((project / ".streamlib" / "logs").stat().st_mode & 0o777) == "0o700"


def test_rotating_a_stream_log_never_follows_a_link_planted_meanwhile(other_user: OtherUser, tmp_path: Path):
    from tatolab._runtime.stored.logs import RotatingJsonl

    project = tmp_path / "p"
    project.mkdir()
    log = RotatingJsonl(project / ".streamlib" / "logs" / "s.jsonl", max_bytes=4096, below=project)
    log.write("first")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".streamlib").rename(tmp_path / "moved")  # the folder swapped for a link after it was opened
    (project / ".streamlib").symlink_to(elsewhere)
    for _ in range(60):
        assert log.write("x" * 100)
    log.close()
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "moved" / "logs" / "s.jsonl.1").exists()  # rotated in the folder it opened


def _venv(project: Path) -> Path:
    site = project / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (project / ".venv" / "bin").mkdir()
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    (site / "helper.pth").write_text("import os\n")
    (site / "lib_pkg").mkdir()
    (site / "lib_pkg" / "__init__.py").write_text("")
    return site


def test_every_folder_and_module_python_imports_from_the_project_and_its_venv_is_checked(other_user: OtherUser,
                                                                                           tmp_path: Path):
    """What the probe ran another user's code with (a world-writable nodes/, a .pth in a world-writable
    site-packages, a world-writable pyvenv.cfg, a node module of theirs): each refused naming it and the fix."""
    project = make_project(tmp_path / "mine", None, {"stream.py": STREAM, "nodes/__init__.py": "",
                                                     "nodes/blur.py": "X = 1\n", "data files/x.bin": ""})
    site = _venv(project)
    trust.check(project)
    (project / "data files").chmod(0o777)  # not a folder Python imports from
    trust.check(project)

    def refused(path: Path, why: str) -> str:
        with pytest.raises(ControlError) as caught:
            trust.check(project)
        said = render(caught.value)
        assert said.startswith(f"{path} {why}, so Tatolab will not run {project} as you"), said
        return said

    (project / "nodes").chmod(0o777)
    said = refused(project / "nodes", "can be written by every user (mode 777)")
    assert f"If it is yours: `chmod -R go-w {project}`" in said
    (project / "nodes").chmod(0o755)
    os.chown(project / "nodes" / "blur.py", other_user.uid, other_user.gid)
    said = refused(project / "nodes" / "blur.py", f"belongs to {other_user.name} (uid {other_user.uid})")
    assert f"If it is yours: `chown -R root {project}`" in said
    os.chown(project / "nodes" / "blur.py", 0, 0)
    (project / "nodes" / "__pycache__").mkdir(mode=0o777)
    (project / "nodes" / "__pycache__").chmod(0o777)
    refused(project / "nodes" / "__pycache__", "can be written by every user (mode 777)")
    (project / "nodes" / "__pycache__").chmod(0o755)
    site.chmod(0o777)
    refused(site, "can be written by every user (mode 777)")
    site.chmod(0o755)
    os.chown(site / "helper.pth", other_user.uid, other_user.gid)
    refused(site / "helper.pth", f"belongs to {other_user.name} (uid {other_user.uid})")
    os.chown(site / "helper.pth", 0, 0)
    (project / ".venv" / "pyvenv.cfg").chmod(0o666)
    refused(project / ".venv" / "pyvenv.cfg", "can be written by every user (mode 666)")
    (project / ".venv" / "pyvenv.cfg").chmod(0o644)
    (site / "lib_pkg" / "__init__.py").chmod(0o646)
    refused(site / "lib_pkg" / "__init__.py", "can be written by every user (mode 646)")
    (site / "lib_pkg" / "__init__.py").chmod(0o644)
    # a folder a .pth file adds to sys.path, outside the project: named, with its own fix
    theirs = other_user.home / "lib"
    assert other_user.run(["mkdir", str(theirs)]).returncode == 0
    (site / "extra.pth").write_text(f"# a comment\n{theirs}\n")
    said = refused(theirs, f"belongs to {other_user.name} (uid {other_user.uid})")
    assert f"If it is yours: `chown -R root {theirs}`" in said
    trust.check(project, env={"TATOLAB_TRUST": str(project)})
    (site / "extra.pth").unlink()
    trust.check(project)


def test_a_link_out_of_the_project_is_walked_once_and_never_for_ever(tmp_path: Path, monkeypatch):
    project = make_project(tmp_path / "mine", None, {"stream.py": STREAM, "nodes/__init__.py": ""})
    (project / "nodes" / "again").symlink_to(project / "nodes")  # a loop: walked once
    trust.check(project)
    (project / "nodes" / "everything").symlink_to("/usr")
    monkeypatch.setattr(trust, "MAX_ENTRIES", 2000)
    with pytest.raises(ControlError, match="leads to more than 2,000 files and folders Python could import from"):
        trust.check(project)
