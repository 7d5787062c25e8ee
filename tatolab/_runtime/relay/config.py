"""Where the relay listens: loopback for every exposed output, and for public ones also the
machine's tailnet addresses (or those set in TATOLAB_MOQ_PUBLIC); nothing else."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess

from tatolab import _settings as settings

DEFAULT_PORT = 4443
LOOPBACK = "127.0.0.1"


class ConfigError(ValueError):
    pass


def port() -> int:
    """The relay's UDP port: TATOLAB_MOQ_PORT, else 4443 (QUIC and WebTransport share it); 0: any free one."""
    try:
        return settings.value("TATOLAB_MOQ_PORT")
    except settings.SettingError as exc:
        raise ConfigError(str(exc)) from None


def hold(number: int) -> socket.socket | None:
    """A TCP socket bound, not listening, to loopback ``number`` (0: a free one), or None where it
    cannot be bound. A bound port is one the kernel never hands to an outgoing connection, so the
    viewer page's port stays ours from the runtime's start and across the page's restarts."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the page binds: past its closed connections
    try:
        held.bind((LOOPBACK, number))
    except OSError:
        held.close()
        return None
    return held


def reserve(chosen: int, tries: int = 64) -> tuple[int, socket.socket | None]:
    """The relay's port and its TCP side held (``hold``): ``chosen``, or for 0 a port free on loopback
    for both TCP and UDP. A chosen port that cannot be held now is still the port (held by another
    program: the listener says so when it starts)."""
    if chosen:
        return chosen, hold(chosen)
    for _ in range(tries):
        page = hold(0)
        if page is None:
            break
        number = page.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind((LOOPBACK, number))
            except OSError:
                page.close()
                continue
        return number, page
    raise ConfigError(f"TATOLAB_MOQ_PORT=0 found no port free for both TCP and UDP on {LOOPBACK}; "
                      "set TATOLAB_MOQ_PORT to a free port")


def public_addresses() -> list[str]:
    """The addresses public outputs are also served on: TATOLAB_MOQ_PUBLIC (comma-separated IP
    addresses; empty: none), else the machine's Tailscale addresses, else none."""
    try:
        given = settings.value("TATOLAB_MOQ_PUBLIC")
    except settings.SettingError as exc:
        raise ConfigError(str(exc)) from None
    return tailscale_addresses() if given is None else given


def tailscale_addresses() -> list[str]:
    if not shutil.which("tailscale"):
        return []
    try:
        done = subprocess.run(["tailscale", "ip", "-4"], capture_output=True, text=True, timeout=2, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in done.stdout.split():
        try:
            found.append(str(ipaddress.ip_address(line)))
        except ValueError:
            pass
    return found


def bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def url(host: str, port: int, path: str) -> str:
    return f"https://{bind(host, port)}/{path}"
