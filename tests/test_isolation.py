"""Another user on the machine gets nothing (issue 9, findings 2 to 4): no planted link or folder
is followed or trusted, the one-per-machine lock always names its holder, and what the runtime
writes is readable by its user alone. Each test uses a second Unix user made for the session.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from harness import BIN, Runtime, make_project, read_jsonl, wait_for
from nodes_fixture import COUNTER, SINK
from other_user import OtherUser
from tatolab._host import status
from tatolab._control import paths
from tatolab._runtime.stored.logs import RotatingJsonl
from tatolab._safe_fs import UnsafePath, open_own_file


def refused_start(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    """Start a tatolabd that must refuse to run; one that runs anyway is ended and reported."""
    process = subprocess.Popen([str(BIN / "tatolabd")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
        raise AssertionError(f"tatolabd started instead of refusing:\n{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


def plant_link(other: OtherUser, link: Path, target: Path) -> None:
    """A link at ``link`` to ``target``, owned by the other user (the probe's attack).

    Made here and handed over with lchown: the other user may not be able to reach the folder."""
    os.symlink(target, link)
    os.lchown(link, other.uid, other.gid)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# -- finding 2: planted symlinks --------------------------------------------------------------


def test_a_socket_folder_planted_as_a_link_is_refused_naming_it_and_its_owner(other_user, shared_dir, tmp_path):
    victim = tmp_path / "root-owned"
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    plant_link(other_user, shared_dir / "streamlib", victim)
    rt = Runtime(tmp_path / "rt")
    rt.env["XDG_RUNTIME_DIR"] = str(shared_dir)  # a shared folder, as /tmp is for the fallback

    line = one_line_error(refused_start(rt.env))

    assert f"{shared_dir / 'streamlib'} is a symbolic link to {victim} owned by {other_user.name}" in line
    assert line.endswith(
        "; the control socket's folder must be yours alone, so Tatolab will not use it. Remove it (an administrator "
        "can, if you cannot), or set XDG_RUNTIME_DIR to a folder of yours, and start `tatolabd` again."
    )
    assert mode(victim) == "0o755", "the link's target was chmod-ed"
    assert list(victim.iterdir()) == []


def test_a_socket_folder_of_another_user_is_refused_naming_its_owner(other_user, shared_dir, tmp_path):
    made = other_user.run(["mkdir", "-m", "777", str(shared_dir / "streamlib")])
    assert made.returncode == 0, made.stderr
    rt = Runtime(tmp_path / "rt")
    rt.env["XDG_RUNTIME_DIR"] = str(shared_dir)

    line = one_line_error(refused_start(rt.env))

    assert f"{shared_dir / 'streamlib'} is a folder owned by {other_user.name} (uid {other_user.uid}), not by you" in line
    assert os.listdir(shared_dir / "streamlib") == []


# the /tmp fallback planted by another user: the runtime starts at a private name (test_places.py)


FAKE_RUNTIME = """
import socket
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(PATH)
server.listen(1)
print("listening", flush=True)
server.settimeout(30)
conn, _ = server.accept()
conn.settimeout(30)
print(len(conn.recv(65536)), flush=True)  # 0: the client hung up without a word
"""


def test_the_cli_never_talks_to_a_socket_another_user_planted(other_user, shared_dir, tmp_path):
    made = other_user.run(["mkdir", "-m", "777", str(shared_dir / "streamlib")])
    assert made.returncode == 0, made.stderr
    planted = shared_dir / "streamlib" / "local-api.sock"
    fake = other_user.python(f"PATH = {str(planted)!r}\n" + FAKE_RUNTIME, preload=("socket",))
    try:
        assert fake.stdout.readline().strip() == "listening", fake.stderr.read()
        rt = Runtime(tmp_path / "rt")
        rt.env["XDG_RUNTIME_DIR"] = str(shared_dir)
        result = rt.cli("streams", cwd=tmp_path)
        received = fake.stdout.readline().strip()
    finally:
        fake.kill()
        fake.communicate()
    assert received == "0", "the CLI sent its request to another user's process"
    line = one_line_error(result)
    assert line == (
        f"error: what answers at {planted} is pid {fake.pid} of user {other_user.name} (uid {other_user.uid}), "
        f"not a runtime of yours, so nothing was sent to it. Remove {planted.parent} (someone else made it) "
        "and start `tatolabd` again."
    )


@pytest.mark.slow
def test_a_lock_path_planted_as_a_link_is_never_opened(other_user, tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("root's data\n")
    rt = Runtime(tmp_path / "rt")
    link = Path(rt.env["TATOLAB_MACHINE_LOCK"])
    plant_link(other_user, link, precious)
    rt.start()
    try:
        assert precious.read_text() == "root's data\n", "the runtime truncated the link's target"
    finally:
        rt.stop()


def test_a_status_file_name_planted_as_a_link_is_refused_and_its_target_untouched(other_user, tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("root's data\n")
    planted = Path(f"/dev/shm/tatolab-test-{uuid.uuid4().hex}#status")
    plant_link(other_user, planted, precious)
    try:
        with pytest.raises(UnsafePath) as refused:
            status.create(str(planted))
        assert f"{planted} is a symbolic link to {precious} owned by {other_user.name}" in str(refused.value)
        assert precious.read_text() == "root's data\n"
        with pytest.raises(UnsafePath):
            status.NodeStatus(str(planted))
    finally:
        planted.unlink()


def test_a_status_file_of_another_user_is_neither_reused_nor_read(other_user):
    planted = Path(f"/dev/shm/tatolab-test-{uuid.uuid4().hex}#status")
    made = other_user.run(["sh", "-c", f"head -c 64 /dev/zero > '{planted}' && chmod 666 '{planted}'"])
    assert made.returncode == 0, made.stderr
    try:
        with pytest.raises(UnsafePath, match=f"owned by {other_user.name}"):
            status.create(str(planted))
        with pytest.raises(UnsafePath, match=f"owned by {other_user.name}"):
            status.NodeStatus(str(planted))
        assert planted.stat().st_uid == other_user.uid  # refused, not taken over
    finally:
        planted.unlink()


def test_a_file_another_user_planted_is_refused_before_it_is_emptied_and_a_fifo_never_hangs(other_user, shared_dir):
    planted = shared_dir / "runtime.jsonl"
    made = other_user.run(["sh", "-c", f"echo theirs > '{planted}' && chmod 666 '{planted}' && mkfifo -m 666 '{planted}.fifo'"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(UnsafePath, match=f"is a file owned by {other_user.name}"):
        RotatingJsonl(planted)
    assert planted.read_text() == "theirs\n"
    with pytest.raises(UnsafePath, match=f"owned by {other_user.name}"):
        open_own_file(shared_dir / "runtime.jsonl.fifo", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)


# -- finding 3: the machine lock ----------------------------------------------------------------


def _lock_name(env: dict[str, str]) -> str:
    saved = os.environ.get("TATOLAB_MACHINE_LOCK")
    os.environ["TATOLAB_MACHINE_LOCK"] = env["TATOLAB_MACHINE_LOCK"]
    try:
        return paths.machine_lock_name()
    finally:
        if saved is None:
            del os.environ["TATOLAB_MACHINE_LOCK"]
        else:
            os.environ["TATOLAB_MACHINE_LOCK"] = saved


SQUATTER = """
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(b"\\0" + NAME.encode())
if LISTEN:
    s.listen(1)
print("holding", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("listening", [True, False], ids=["answering", "silent"])
def test_a_squatter_on_the_machine_lock_is_named_by_user_and_pid(other_user, tmp_path, listening):
    rt = Runtime(tmp_path / "rt")
    code = f"NAME = {_lock_name(rt.env)!r}\nLISTEN = {listening}\n" + SQUATTER
    squatter = other_user.python(code, preload=("socket",), stdin=subprocess.PIPE)
    try:
        assert squatter.stdout.readline().strip() == "holding", squatter.stderr.read()
        line = one_line_error(refused_start(rt.env))
    finally:
        squatter.kill()
        squatter.communicate()
    assert line.startswith(
        f"error: a runtime is already running on this machine: pid {squatter.pid}, "
        f"user {other_user.name} (uid {other_user.uid}), executable "
    )
    assert line.endswith("One user owns the runtime on a machine at a time: that user must stop it first, or an "
                         f"administrator can end it (`sudo kill {squatter.pid}`; the lock is no file: it is free "
                         "once that process ends).")


def test_another_users_runtime_is_refused_naming_the_running_one(runtime, other_user):
    env = {k: v for k, v in runtime.env.items() if k != "VIRTUAL_ENV"}
    env.update(XDG_RUNTIME_DIR=str(other_user.home / "run"), XDG_STATE_HOME=str(other_user.home / "state"))
    daemon = other_user.tatolabd(env)
    try:
        out, err = daemon.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.communicate()
        raise AssertionError("a second user's runtime started beside the first")
    line = one_line_error(subprocess.CompletedProcess([], daemon.returncode, out, err))
    assert line.startswith(
        f"error: a runtime is already running on this machine: pid {runtime.process.pid}, user root (uid 0), executable "
    ), line
    assert "tatolabd" in line
    assert line.endswith(f"that user must stop it first, or an administrator can end it (`sudo kill {runtime.process.pid}`; "
                         "the lock is no file: it is free once that process ends).")
    assert runtime.answers()


@pytest.mark.slow
def test_the_lock_leaves_nothing_on_disk_and_frees_itself_when_the_holder_is_killed(tmp_path):
    rt = Runtime(tmp_path / "rt").start()
    try:
        assert not Path(rt.env["TATOLAB_MACHINE_LOCK"]).exists()
        rt.stop(signal.SIGKILL)
        wait_for(lambda: rt.leftover_processes() == [], what="the killed runtime's nodes to end")
        rt.start()  # the kernel freed the name with the killed holder
    finally:
        rt.stop()


# -- finding 4: what the runtime writes is its user's alone ---------------------------------------


def test_state_records_logs_and_the_socket_are_user_only(tmp_path, project_venv):
    rt = Runtime(tmp_path / "rt")
    state = tmp_path / "rt" / "state" / "tatolab"
    state.mkdir(parents=True, mode=0o755)  # as an older version left it
    state.chmod(0o755)
    (state / "runtime.jsonl").write_text("")
    (state / "runtime.jsonl").chmod(0o644)
    rt.start()
    try:
        files = {"stream.py": STREAM, "nodes/__init__.py": "", "nodes/counter.py": COUNTER, "nodes/sinks.py": SINK}
        project = make_project(tmp_path / "project", project_venv, files)
        rt.cli("run", "-d", cwd=project, check=True)
        wait_for(lambda: len(read_jsonl(project / "out.jsonl")) >= 3, timeout=40, what="the kept stream to run")
        wait_for(lambda: (project / ".streamlib" / "logs" / "private.jsonl").exists(), what="the stream's log")
        found = {
            "state folder": mode(state),
            "runtime.jsonl": mode(state / "runtime.jsonl"),
            "running.json": mode(state / "running.json"),
            "records folder": mode(state / "streams"),
            "record": mode(state / "streams" / "private.json"),
            "stream log": mode(project / ".streamlib" / "logs" / "private.jsonl"),
            "log folder": mode(project / ".streamlib" / "logs"),
            "socket folder": mode(rt.socket.parent),
            "socket": mode(rt.socket),
        }
        folders = {"state folder", "records folder", "log folder", "socket folder"}
        assert found == {k: "0o700" if k in folders else "0o600" for k in found}
    finally:
        rt.cli("rm", "private")
        rt.stop()


STREAM = '''
from tatolab.stream import StreamBuilder, stream
from nodes.counter import Counter
from nodes.sinks import OrderedSink


@stream
def private(stream_builder: StreamBuilder) -> None:
    counter = stream_builder.add(Counter)
    sink = stream_builder.add(OrderedSink, config={"path": "out.jsonl"})
    stream_builder.connect(counter.output("counts"), sink.input("rows"))
'''
