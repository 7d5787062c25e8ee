"""Where the control socket and the shared-memory files live when the usual places are not to be had:
XDG_RUNTIME_DIR unset (an agent's host starts the CLI with a minimal environment) and names in
/tmp or /dev/shm another user took first. The runtime and every client choose the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from harness import BIN
from other_user import OtherUser
from tatolab._control import paths
from tatolab._control.client import NoRuntime


def test_without_xdg_runtime_dir_run_user_is_used_when_it_is_the_users_with_mode_700(tmp_path: Path):
    run_user, tmp = tmp_path / "run-user", tmp_path / "tmp"  # stand-ins for /run/user and /tmp
    mine = run_user / str(os.getuid())
    tmp.mkdir()
    assert paths.socket_place({}, run_user=run_user, tmp=tmp).folder == tmp / f"streamlib-{os.getuid()}"
    mine.mkdir(parents=True, mode=0o755)
    mine.chmod(0o755)  # not what pam_systemd makes: not used
    place = paths.socket_place({}, run_user=run_user, tmp=tmp)
    assert place.folder == tmp / f"streamlib-{os.getuid()}"
    assert place.looked == ["XDG_RUNTIME_DIR is unset", f"{mine} has mode 755, not 700"]
    mine.chmod(0o700)
    assert paths.socket_place({}, run_user=run_user, tmp=tmp).folder == mine / "streamlib"
    given = paths.socket_place({"XDG_RUNTIME_DIR": str(tmp)}, run_user=run_user, tmp=tmp)
    assert (given.folder, given.looked) == (tmp / "streamlib", [])


def test_the_no_runtime_message_names_every_place_it_looked():
    said = str(NoRuntime(Path("/tmp/streamlib-7/local-api.sock"),
                         ["XDG_RUNTIME_DIR is unset", "/run/user/7 does not exist"]))
    assert said == ("no runtime is running on this machine: nothing answers at /tmp/streamlib-7/local-api.sock (it "
                    "looked there because XDG_RUNTIME_DIR is unset and /run/user/7 does not exist). Start one by "
                    "running `tatolabd` in a terminal.")


def _namespaced(script: str, env: dict[str, str], timeout: float = 120) -> str:
    """``script`` (sh) in a mount namespace of its own where /tmp, /dev/shm and /run/user are fresh
    tmpfs stand-ins, so a runtime there meets exactly what the script sets up and nothing of the
    machine's real folders is touched; its output. Needs root and unshare (the tests run as root)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to give a runtime stand-ins for /tmp, /dev/shm and /run/user")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m is not allowed here (a container without CAP_SYS_ADMIN)")
    # the checkout (its .venv runs the runtime) stays reachable when it lies in a folder replaced here
    # (a clone under /tmp): held open before, bound back after (-c: the open folder, not its old name)
    repo = Path(BIN).parent.parent
    prelude = (
        f"set -u\nmount --make-rprivate /\nexec 9<{str(repo)!r}\n"
        "for d in /tmp /dev/shm /run/user; do mkdir -p $d && mount -t tmpfs -o mode=1777 tmpfs $d; done\n"
        f"[ -d {str(BIN)!r} ] || {{ mkdir -p {str(repo)!r} && mount -c --bind /proc/self/fd/9 {str(repo)!r}; }}\n"
        "exec 9<&-\n"
        "chmod 755 /run/user\nexport XDG_STATE_HOME=/tmp/state\nunset XDG_RUNTIME_DIR\n"
        f"BIN={str(BIN)!r}\n"
        "wait_answer() { for i in $(seq 600); do $BIN/tatolab streams >/dev/null 2>&1 && return 0; "
        "kill -0 $1 2>/dev/null || return 1; sleep 0.1; done; return 1; }\n"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", prelude + textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return done.stdout + done.stderr


def _env(tmp_path: Path) -> dict[str, str]:
    """An agent host's filtered environment (no XDG_RUNTIME_DIR), and a machine lock of the test's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "VIRTUAL_ENV")}
    env["TATOLAB_MACHINE_LOCK"] = str(tmp_path / "lock")
    return env


def test_a_cli_without_xdg_runtime_dir_finds_the_runtime_in_run_user(tmp_path: Path):
    """pam_systemd made /run/user/<uid> (a stand-in), the runtime started without XDG_RUNTIME_DIR, and
    so does the CLI (an MCP host's minimal environment): it finds the runtime there."""
    uid = os.getuid()
    out = _namespaced(f"""
        $BIN/tatolab streams; echo "before: $?"
        mkdir -m 700 /run/user/{uid}
        $BIN/tatolabd 2>/dev/null & daemon=$!
        wait_answer $daemon; echo "answered: $?"
        $BIN/tatolab streams; echo "streams: $?"
        ls /run/user/{uid}/streamlib; ls -d /tmp/streamlib-{uid} 2>&1
        kill $daemon; wait $daemon; echo "stopped: $?"
    """, _env(tmp_path))
    assert (f"nothing answers at /tmp/streamlib-{uid}/local-api.sock (it looked there because XDG_RUNTIME_DIR is "
            f"unset and /run/user/{uid} does not exist). Start one by running `tatolabd` in a terminal.") in out
    assert "before: 1" in out and "answered: 0" in out and "streams: 0" in out and "stopped: 0" in out, out
    assert "local-api.sock" in out and f"/tmp/streamlib-{uid}': No such file" in out, out


def test_names_another_user_took_first_in_tmp_and_dev_shm_do_not_stop_the_runtime(other_user: OtherUser,
                                                                                   tmp_path: Path):
    """Another user took /tmp/streamlib-<uid> (a link) and /dev/shm/tatolab-<uid> (a folder) before the
    runtime started. It starts anyway at private names of the user's own, says once who took the
    usual ones, and the CLI finds it; the squatter's link and folder are left as they were."""
    uid, other = os.getuid(), other_user.uid
    out = _namespaced(f"""
        mkdir -m 755 /tmp/victim
        ln -s /tmp/victim /tmp/streamlib-{uid} && chown -h {other} /tmp/streamlib-{uid}
        mkdir -m 777 /dev/shm/tatolab-{uid} && chown {other} /dev/shm/tatolab-{uid}
        $BIN/tatolabd 2>/dev/null & daemon=$!
        wait_answer $daemon; echo "answered: $?"
        $BIN/tatolab streams; echo "streams: $?"
        kill $daemon; wait $daemon; echo "stopped: $?"
        $BIN/tatolabd 2>/dev/null & daemon=$!
        wait_answer $daemon; echo "again: $?"
        kill $daemon; wait $daemon
        echo "victim: $(ls -A /tmp/victim | wc -l) squatted: $(ls -A /dev/shm/tatolab-{uid} | wc -l)"
        echo "private: $(ls -d /tmp/streamlib-{uid}-* | wc -l) $(stat -c %a /tmp/streamlib-{uid}-*)"
        echo "record: $(stat -c %a /tmp/state/tatolab/{paths.PLACES_FILE})"
        grep -o '"message": *"[^"]*not yours[^"]*"' /tmp/state/tatolab/runtime.jsonl
    """, _env(tmp_path))
    assert "answered: 0" in out and "streams: 0" in out and "stopped: 0" in out and "again: 0" in out, out
    assert "victim: 0 squatted: 0" in out, out
    assert "private: 1 700" in out and "record: 600" in out, out  # the second start reused the recorded name
    said = [line for line in out.splitlines() if "not yours" in line]
    name = f"{other_user.name} (uid {other})"
    assert len(said) == 4, out  # once per start, for each of the two names
    assert f"/tmp/streamlib-{uid} is a symbolic link of {name}, not yours, so this runtime uses /tmp/streamlib-{uid}-" \
        in said[0]
    assert f"/dev/shm/tatolab-{uid} is a folder of {name}, not yours, so this runtime uses /dev/shm/tatolab-{uid}-" \
        in said[1]
    assert "Traceback" not in out, out
