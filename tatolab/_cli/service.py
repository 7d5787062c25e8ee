"""`tatolab service install|uninstall`: the runtime as a systemd user service on Linux.

The unit starts ``tatolabd`` at login and restarts it when it crashes; kept streams come
back with it. As with ``systemctl enable``, ``install`` writes and enables the unit (the
symlink ``systemctl --user enable`` would make) and starts nothing; ``install --now`` also
starts it. ``--now`` asks ``systemctl --user`` first: where no user manager answers (a
container, ``su`` without a login session, no systemd at all), nothing could start it, so it
says so, writes nothing and exits non-zero with what to do instead. ``uninstall`` stops it and
removes the unit, the symlink and the ``default.target.wants/`` folder once it is empty.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab import _settings as settings
from tatolab._cli.commands import add
from tatolab._cli.output import fail

UNIT_NAME = "tatolabd.service"
WANTED_BY = "default.target"


def carried_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Every setting the runtime reads (each TATOLAB_* and XDG_* one of _settings.py that `tatolabd`
    reads) that is set here: the service's runtime then runs as one started from this shell would,
    with the same socket, state folder, lock, port... None other is copied."""
    environ = dict(os.environ) if environ is None else environ
    return {name: environ[name] for name, setting in settings.SETTINGS.items()
            if settings.RUNTIME in setting.readers and environ.get(name)}


def unit_folder() -> Path:
    config = settings.value("XDG_CONFIG_HOME")  # checked as the command started (_settings.py)
    return (Path(config) if config else Path.home() / ".config") / "systemd" / "user"


def find_tatolabd() -> Path | None:
    import shutil

    beside = Path(sys.executable).parent / "tatolabd"  # the same environment as this CLI
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside.absolute()
    found = shutil.which("tatolabd")
    return Path(found).absolute() if found else None


def _quote(word: str) -> str:
    """One word of a systemd command line: specifiers and quotes escaped."""
    word = word.replace("%", "%%")
    if any(ch in word for ch in ' \t"\\\''):
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def unit_text(tatolabd: Path, env: dict[str, str]) -> str:
    lines = [
        "[Unit]",
        "Description=Tatolab runtime (tatolabd): runs this user's streams, and loads kept streams at start",
        "Documentation=https://tatolab.com/docs/run/manage",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={_quote(str(tatolabd))}",
        "Restart=on-failure",
        "RestartSec=2",
        # tatolabd ends its streams on SIGTERM; give node processes time to stop cleanly
        "TimeoutStopSec=30",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    lines += [f"Environment={_quote(f'{key}={value}')}" for key, value in sorted(env.items())]
    lines += ["", "[Install]", f"WantedBy={WANTED_BY}", ""]
    return "\n".join(lines)


def user_manager_problem() -> str | None:
    """Why ``systemctl --user`` cannot reach this user's systemd manager, or None when it can."""
    import shutil
    import subprocess

    if shutil.which("systemctl") is None:
        return "systemctl is not installed"
    try:
        probe = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True, text=True,
                               timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`systemctl --user` did not answer ({exc})"
    if probe.returncode == 0:
        return None
    said = (probe.stderr or probe.stdout).strip().splitlines()
    return f"`systemctl --user` says: {said[0] if said else f'exit {probe.returncode}'}"


def instead_hint(user: str) -> str:
    """What to do on a machine where no systemd user manager answers."""
    if Path("/run/systemd/system").is_dir():  # systemd runs the machine; this user just has no manager
        return (f"Start one with `loginctl enable-linger {user}` (it then keeps running when nobody is logged "
                "in), or log in over ssh or at the desktop rather than with su, then run "
                "`tatolab service install --now` again. Until then, run `tatolabd` in a terminal of its own.")
    return ("Without systemd, run `tatolabd` in a terminal of its own (under tmux or screen it outlives "
            "the terminal), or start it from whatever starts services here (a container's command, "
            "supervisord, an init script); kept streams load whenever it starts.")


def _systemctl(*args: str) -> tuple[bool, str]:
    import subprocess

    result = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=60)
    return result.returncode == 0, (result.stderr or result.stdout).strip()


def linger_hint() -> str:
    import getpass

    user = getpass.getuser()
    if Path("/var/lib/systemd/linger", user).exists():
        return f"Lingering is on for {user}: the runtime keeps running when nobody is logged in."
    return (
        "On a machine nobody logs into (over ssh, a server), turn on lingering so the runtime, and your "
        f"kept streams, keep running when nobody is logged in:\n  loginctl enable-linger {user}"
    )


def cmd_install(args: argparse.Namespace) -> int:
    import getpass

    if not sys.platform.startswith("linux"):
        return fail("`tatolab service` writes a systemd user unit, which only Linux has")
    tatolabd = find_tatolabd()
    if tatolabd is None:
        return fail(f"no tatolabd beside {sys.executable} or on PATH; install the runtime from a clone of Tatolab: "
                    "`uv tool install '/path/to/tatolab[runtime]'` (README, \"Install\")")
    problem = user_manager_problem()
    if problem is not None and args.now:
        print(f"error: no systemd user manager is running for {getpass.getuser()}: {problem}. "
              "A unit would never start, so none was written.", file=sys.stderr)
        print(instead_hint(getpass.getuser()), file=sys.stderr)
        return 1
    folder = unit_folder()
    unit = folder / UNIT_NAME
    wants = folder / f"{WANTED_BY}.wants" / UNIT_NAME
    env = carried_env()
    folder.mkdir(parents=True, exist_ok=True)
    unit.write_text(unit_text(tatolabd, env))
    wants.parent.mkdir(parents=True, exist_ok=True)
    if wants.is_symlink() or wants.exists():
        wants.unlink()
    wants.symlink_to(unit)
    print(f"wrote {unit}: it starts {tatolabd} at login and restarts it if it crashes")
    print(f"enabled it ({wants})")
    if env:
        print(f"copied into it, as set here: {', '.join(sorted(env))} (every Tatolab and XDG setting tatolabd "
              "reads that is set in this shell; no other)")
    else:
        print("no Tatolab or XDG setting tatolabd reads is set here, so the unit sets none")
    start = "systemctl --user start tatolabd"
    if problem is not None:
        print(f"No systemd user manager answers now ({problem}), so nothing was started: the unit "
              "starts when a user manager starts, at your next login.")
        print(instead_hint(getpass.getuser()))
        return 0
    ok, message = _systemctl("daemon-reload")
    if ok and args.now:
        ok, message = _systemctl("restart", UNIT_NAME)
        if not ok:
            return fail(f"the unit is installed, but starting it failed: {message}. "
                        f"Stop any tatolabd running in a terminal, then: {start}")
        print("started it: `systemctl --user status tatolabd` shows it, `journalctl --user -u tatolabd` its output")
    elif args.now:
        return fail(f"the unit is installed, but `systemctl --user daemon-reload` failed: {message}")
    else:
        print(f"not started (`tatolab service install --now` starts it too); start it now with: {start}")
        print("(stop a tatolabd running in a terminal first: one runtime runs per machine)")
    print(linger_hint())
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    folder = unit_folder()
    unit = folder / UNIT_NAME
    wants = folder / f"{WANTED_BY}.wants" / UNIT_NAME
    if not unit.exists() and not wants.is_symlink():
        print(f"no {UNIT_NAME} in {folder}; nothing to remove")
        return 0
    reachable = user_manager_problem() is None
    if reachable:
        _systemctl("stop", UNIT_NAME)  # kept streams stay recorded; they load with the next runtime
    if wants.is_symlink() or wants.exists():
        wants.unlink()
    unit.unlink(missing_ok=True)
    try:
        wants.parent.rmdir()  # default.target.wants/, once nothing else is wanted there
    except OSError:
        pass
    if reachable:
        _systemctl("daemon-reload")
        print(f"stopped and removed {unit}")
    else:
        print(f"removed {unit}; if the service is running, stop it with: systemctl --user stop tatolabd")
    print("Kept streams stay recorded: they load again the next time `tatolabd` starts.")
    return 0


def register(commands: Any) -> None:
    service = add(commands, "service")
    actions = service.add_subparsers(dest="action", required=True, metavar="ACTION")
    install = actions.add_parser("install", help="write and enable a systemd user unit for tatolabd (--now: start it too)")
    install.add_argument("--now", action="store_true", help="also start it now, as `systemctl enable --now` does")
    install.add_argument("--no-start", action="store_true", help=argparse.SUPPRESS)  # what install does anyway
    install.set_defaults(func=cmd_install)
    uninstall = actions.add_parser("uninstall", help="stop the service and remove its unit")
    uninstall.set_defaults(func=cmd_uninstall)
