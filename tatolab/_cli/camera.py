"""`tatolab enable-virtual-camera [--print]`: v4l2loopback set up once, so VirtualCameraSink has a
camera to write to (Linux). It loads the module now and at every boot, and lets this user open
the device; ``--print`` prints the commands instead of running them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._value import Value

LABEL = "Tatolab"
FIRST_NUMBER = 10  # /dev/video10: clear of the numbers real cameras take
MODULES_LOAD = "/etc/modules-load.d/tatolab-virtual-camera.conf"
MODPROBE_OPTIONS = "/etc/modprobe.d/tatolab-virtual-camera.conf"
INSTALL_HINT = ("install it, then run `tatolab enable-virtual-camera` again: `sudo apt-get install v4l2loopback-dkms` "
                "(Debian, Ubuntu), `sudo dnf install v4l2loopback` (Fedora, from RPM Fusion) or "
                "`sudo pacman -S v4l2loopback-dkms` (Arch)")


class Step(Value):
    """One command of the set-up, what it does, and what is written to it (tee)."""

    __slots__ = ("argv", "does", "stdin")

    def __init__(self, argv: list[str], does: str, stdin: str | None = None) -> None:
        self.argv = argv
        self.does = does
        self.stdin = stdin

    def shell(self, sudo: bool) -> str:
        import shlex

        line = ("sudo " if sudo else "") + shlex.join(self.argv)
        if self.stdin is not None:
            line = f"printf '%s\\n' {shlex.quote(self.stdin.rstrip(chr(10)))} | {line} >/dev/null"
        return line


def options(video_nr: int) -> str:
    return f"devices=1 video_nr={video_nr} card_label={LABEL} exclusive_caps=1"


def free_number() -> int:
    """The first /dev/videoN from 10 that is free."""
    from tatolab._media import v4l2

    n = FIRST_NUMBER
    while (v4l2.DEV / f"video{n}").exists():
        n += 1
    return n


def module_available() -> bool:
    """Whether this kernel has v4l2loopback (loaded, or installed for it)."""
    import platform
    import shutil
    import subprocess
    from tatolab._media import v4l2

    if v4l2.loopback_module_loaded():
        return True
    if shutil.which("modinfo"):
        return subprocess.run(["modinfo", "v4l2loopback"], capture_output=True).returncode == 0
    modules = Path("/lib/modules") / platform.release()
    return any(modules.rglob("v4l2loopback.ko*")) if modules.is_dir() else False


def in_video_group(user: str) -> bool:
    import grp

    try:
        group = grp.getgrnam("video")
    except KeyError:
        return False
    return user in group.gr_mem or _primary_gid(user) == group.gr_gid


def _primary_gid(user: str) -> int | None:
    import pwd

    try:
        return pwd.getpwnam(user).pw_gid
    except KeyError:
        return None


def plan(user: str, video_nr: int, *, loaded: bool, in_group: bool) -> list[Step]:
    """The steps: load the module now (unless loaded), at every boot, and let ``user`` open it."""
    steps = []
    if not loaded:
        steps.append(Step(["modprobe", "v4l2loopback", *options(video_nr).split()],
                          f"load v4l2loopback now, as /dev/video{video_nr} named {LABEL}"))
    steps.append(Step(["tee", MODULES_LOAD], "load it at every boot", stdin="v4l2loopback\n"))
    steps.append(Step(["tee", MODPROBE_OPTIONS], "with the same options",
                      stdin=f"options v4l2loopback {options(video_nr)}\n"))
    if user != "root" and not in_group:
        steps.append(Step(["usermod", "-aG", "video", user],
                          f"let {user} open video devices (from the next login on)"))
    return steps


def _user() -> str:
    import getpass

    return os.environ.get("SUDO_USER") or getpass.getuser()


def cmd_enable(args: argparse.Namespace) -> int:
    import platform
    import shlex
    import shutil
    import subprocess
    from tatolab._media import v4l2

    if not sys.platform.startswith("linux"):
        return fail("a virtual camera through v4l2loopback is Linux only")
    user, root = _user(), os.geteuid() == 0
    loaded = v4l2.loopback_module_loaded()
    video_nr = free_number()
    steps = plan(user, video_nr, loaded=loaded, in_group=in_video_group(user))
    if args.print:
        if not module_available():
            print(f"# this kernel ({platform.release()}) has no v4l2loopback module: {INSTALL_HINT}")
        if loaded:
            print(f"# v4l2loopback is loaded already (devices: {', '.join(map(str, v4l2.loopbacks())) or 'none'})")
        for step in steps:
            print(f"{step.shell(sudo=not root)}  # {step.does}")
        return 0
    if not module_available():
        return fail(f"this kernel ({platform.release()}) has no v4l2loopback module, so there can be no virtual "
                    f"camera; {INSTALL_HINT}")
    sudo = [] if root else ["sudo"]
    if not root and shutil.which("sudo") is None:
        return fail("setting up v4l2loopback needs root, and there is no sudo here; run the commands "
                    "`tatolab enable-virtual-camera --print` prints as root")
    for step in steps:
        print(f"{step.does}: {step.shell(sudo=not root)}")
        result = subprocess.run(sudo + step.argv, input=step.stdin, text=True,
                                stdout=subprocess.DEVNULL if step.stdin is not None else None)
        if result.returncode != 0:
            return fail(f"`{shlex.join(sudo + step.argv)}` failed (exit {result.returncode}); "
                        "fix what it said, then run `tatolab enable-virtual-camera` again")
    found = v4l2.loopbacks()
    print(f"virtual camera ready: {', '.join(map(str, found)) or f'/dev/video{video_nr}'} ({LABEL}); "
          "VirtualCameraSink writes to it")
    return 0


def register(commands: Any) -> None:
    enable = add(commands, "enable-virtual-camera")
    enable.add_argument("--print", action="store_true", help="print the commands instead of running them")
    enable.set_defaults(func=cmd_enable)
