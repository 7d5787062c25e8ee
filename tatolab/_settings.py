"""Every setting Tatolab reads from the environment, in one table: its name, the values it allows,
its default, and which program reads it.

``tatolabd`` and ``tatolab`` check the settings they read once, as they start (``refuse_bad``),
so ``TATOLAB_SURFACE_SLOTS=-3`` is refused with what is allowed instead of being quietly
replaced or failing later; code that needs a value asks ``value(NAME)``. README's settings table
lists the same rows (a test compares them). A new setting is one more ``Setting`` in ``SETTINGS``.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: every command starts here
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping

RUNTIME, CLI = "tatolabd", "tatolab"  # who reads a setting


class SettingError(ValueError):
    """A setting's value that is not allowed, named with what is."""


class Setting:
    """One setting (a plain class, not a dataclass: `tatolab` reads this table as it starts,
    and importing dataclasses would cost every command a fifth of its start)."""

    __slots__ = ("name", "parse", "default", "allowed", "default_text", "readers", "what", "empty_is_unset")

    def __init__(self, name: str, parse: Callable[[str], Any], default: Any, allowed: str, default_text: str,
                 readers: tuple[str, ...], what: str, empty_is_unset: bool = True) -> None:
        self.name = name
        self.parse = parse  # the text to its value; ValueError when not allowed
        self.default = default
        self.allowed = allowed  # what the value may be, in words ("a whole number from 1 to 1024")
        self.default_text = default_text  # the default, in words
        self.readers = readers  # RUNTIME, CLI, or both
        self.what = what  # what it sets, one line
        self.empty_is_unset = empty_is_unset  # TATOLAB_MOQ_PUBLIC= (empty) means "none", not the default


def whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())  # ValueError for "abc", "1.5"
        if not low <= value <= high:
            raise ValueError(text)
        return value
    return parse


def seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text.strip())
        if not low <= value <= high:  # also refuses nan
            raise ValueError(text)
        return value
    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return parse


def absolute_path(text: str) -> str:
    if not text.startswith("/") or "\0" in text:
        raise ValueError(text)
    return text


def absolute_paths(text: str) -> list[str]:
    return [absolute_path(part) for part in text.split(":") if part]


def trusted(text: str) -> list[str]:
    return [part if part == "*" else absolute_path(part) for part in text.split(":") if part]


def addresses(text: str) -> list[str]:
    import ipaddress  # here: only the runtime reads this setting

    return [str(ipaddress.ip_address(part)) for part in filter(None, (p.strip() for p in text.split(",")))]


def machine_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,62}", text):
        raise ValueError(text)
    return text.lower()


def any_text(text: str) -> str:
    if "\0" in text:
        raise ValueError(text)
    return text


_GIB = 1 << 30
SETTINGS: dict[str, Setting] = {s.name: s for s in [
    Setting("TATOLAB_CLI_TIMEOUT_S", seconds(0.1, 86400), 60.0, "a number of seconds from 0.1 to 86400", "60",
            (CLI,), "how long a command waits for the runtime's answer"),
    Setting("TATOLAB_IDLE_TIMEOUT_S", seconds(0.1, 86400), 30.0, "a number of seconds from 0.1 to 86400", "30",
            (RUNTIME,), "a control connection that sends no request this long is closed"),
    Setting("TATOLAB_LINK_MEMORY_MB", whole(4, 1 << 20), 2048, "a whole number of MiB from 4 to 1048576", "2048",
            (RUNTIME,), "the most /dev/shm one link's ring may take"),
    Setting("TATOLAB_LOG_MAX_BYTES", whole(4096, 1 << 40), 8 << 20, "a whole number of bytes from 4096 to 2^40",
            "8388608 (8 MiB)", (RUNTIME,), "the size at which a log file is rotated (three files are kept)"),
    Setting("TATOLAB_LOADS_AT_ONCE", whole(1, 256), None, "a whole number from 1 to 256",
            "the number of CPUs (at least 2)", (RUNTIME,),
            "streams compiled and started at once; more loads wait in line, each told its place"),
    Setting("TATOLAB_MACHINE_LOCK", any_text, "", "any name", "unset: the machine's one lock", (RUNTIME,),
            "gives a runtime a machine lock of its own (runtimes side by side, as the tests run them)"),
    Setting("TATOLAB_MACHINE_NAME", machine_name, None, "letters, digits and -._~ (at most 63, starting with a "
            "letter or digit)", "the Tailscale name, else the hostname", (RUNTIME,),
            "the machine's name, the first part of every full address"),
    Setting("TATOLAB_MAX_NODES", whole(1, 4096), 256, "a whole number from 1 to 4096", "256", (RUNTIME,),
            "the most nodes running on this machine, all streams together (each is a process)"),
    Setting("TATOLAB_MAX_STREAM_NODES", whole(1, 4096), 64, "a whole number from 1 to 4096", "64", (RUNTIME,),
            "the most nodes one stream may have"),
    Setting("TATOLAB_MOQ_PORT", whole(0, 65535), 4443, "a UDP port from 0 to 65535 (0: a free one, chosen at start)",
            "4443", (RUNTIME,), "the MoQ relay's port (TCP too, for the viewer page); `graph` shows the one in use"),
    Setting("TATOLAB_FOXGLOVE_PORT", whole(0, 65535), 8765, "a TCP port from 0 to 65535 (0: any free one)", "8765",
            (RUNTIME,), "the port the Foxglove app connects to (`tatolab foxglove`), on loopback"),
    Setting("TATOLAB_MOQ_PUBLIC", addresses, None, "IP addresses, comma-separated (empty: none)",
            "the machine's Tailscale addresses", (RUNTIME,), "where public outputs are also served",
            empty_is_unset=False),
    Setting("TATOLAB_RECORDINGS", absolute_path, None, "an absolute path", "unset: only the recorded stream's project",
            (RUNTIME,), "a folder where an agent's MCP record_start may also write (else only in the recorded stream's project)"),
    Setting("TATOLAB_MOQ_GROUP_MS", whole(0, 10_000), 100, "a whole number of milliseconds from 0 to 10000", "100",
            (RUNTIME,), "how long one MoQ group of an output's bags spans (0: a group per bag)"),
    Setting("TATOLAB_SURFACE_SLOTS", whole(1, 1024), 32, "a whole number from 1 to 1024", "32", (RUNTIME,),
            "frames the surface pool holds at once"),
    Setting("TATOLAB_SURFACE_HOLDERS", whole(16, 4096), 1024, "a whole number from 16 to 4096", "1024", (RUNTIME,),
            "processes that may use frames at once (each node that touches a frame, each `exchange`)"),
    Setting("TATOLAB_SURFACE_BUDGET_MB", whole(1, 1 << 20), 2 * _GIB >> 20, "a whole number of MiB from 1 to 1048576",
            "2048", (RUNTIME,), "the most /dev/shm the surface pool's pixels may take"),
    Setting("TATOLAB_WARM", one_of("0", "1"), "1", "0 or 1", "1", (RUNTIME,),
            "1: nodes start from a warm interpreter; 0: every process starts cold"),
    Setting("TATOLAB_TRUST", trusted, [], "absolute paths of project folders, separated by ':' (*: every project)", "none",
            (RUNTIME, CLI), "projects another user owns that you trust to run as you (as `tatolab trust PATH`)"),
    Setting("XDG_RUNTIME_DIR", absolute_path, None, "an absolute path", "unset: /run/user/<uid> if it is "
            "yours with mode 0700, else /tmp/streamlib-<uid>", (RUNTIME, CLI), "where the control socket's folder `streamlib` is"),
    Setting("XDG_CONFIG_HOME", absolute_path, None, "an absolute path", "~/.config", (CLI,),
            "where `tatolab service install` writes the systemd user unit (systemd/user/)"),
    Setting("XDG_STATE_HOME", absolute_path, None, "an absolute path", "~/.local/state", (RUNTIME, CLI),
            "where the runtime's state folder `tatolab` is (kept streams, its log, trusted projects)"),
]}

# Set by the runtime for the processes it starts, never by a user: not checked, not listed.
INTERNAL = ("TATOLAB_LOG_FD", "TATOLAB_PARENT_PID", "TATOLAB_NODE_OF", "TATOLAB_SURFACE_POOL")


def refusal(setting: Setting, text: str) -> str:
    return (f"{setting.name}={text!r} is not allowed: give {setting.allowed} "
            f"(default: {setting.default_text}), or unset it")


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of setting ``name`` from ``environ`` (this process's environment), or its default.

    Raises SettingError naming the setting and what it allows."""
    setting = SETTINGS[name]
    text = (os.environ if environ is None else environ).get(name)
    if text is None or (setting.empty_is_unset and not text.strip()):
        return setting.default
    try:
        return setting.parse(text)
    except ValueError:
        raise SettingError(refusal(setting, text)) from None


def problems(reader: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every setting ``reader`` reads whose value is not allowed, with what is."""
    environ = os.environ if environ is None else environ
    found = []
    for name, setting in SETTINGS.items():
        if reader in setting.readers:
            try:
                value(name, environ)
            except SettingError as exc:
                found.append(str(exc))
    return found


def unknown(environ: Mapping[str, str] | None = None) -> list[str]:
    """Each TATOLAB_* name that is no setting (a typo would otherwise be ignored without a word)."""
    environ = os.environ if environ is None else environ
    found = []
    for name in sorted(environ):
        if name.startswith("TATOLAB_") and name not in SETTINGS and name not in INTERNAL:
            import difflib  # only when there is a name to place: not on every command's path

            close = difflib.get_close_matches(name, list(SETTINGS), n=1)
            hint = f"did you mean {close[0]}?" if close else "the settings are listed in README (Settings)"
            found.append(f"{name} is not a setting of Tatolab, so it changes nothing ({hint})")
    return found


def refuse_bad(reader: str) -> None:
    """Stop the program, saying what is wrong, if a setting it reads has a value not allowed
    (and warn, once, of a TATOLAB_* name that is no setting: `tatolabd` as it starts, `tatolab`
    at each command)."""
    found = problems(reader)
    if found:
        raise SystemExit("error: " + "\nerror: ".join(found))
    for line in unknown():
        print(f"warning: {line}", file=sys.stderr)


def readme_table() -> str:
    """The settings as README's Markdown table (a test checks README holds exactly this)."""
    rows = ["| Setting | Read by | What it sets | Allowed | Default |", "|---|---|---|---|---|"]
    for s in SETTINGS.values():
        rows.append(f"| `{s.name}` | {', '.join(f'`{r}`' for r in s.readers)} | {s.what} | {s.allowed} | "
                    f"{s.default_text} |")
    return "\n".join(rows)
