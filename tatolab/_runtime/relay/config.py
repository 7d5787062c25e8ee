"""Where the relay listens: loopback for every exposed output, and for public ones also the
machine's tailnet addresses (or those set in TATOLAB_MOQ_PUBLIC); nothing else."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

from tatolab import _settings as settings

DEFAULT_PORT = 4443
LOOPBACK = "127.0.0.1"


class ConfigError(ValueError):
    pass


def port() -> int:
    """The relay's UDP port: TATOLAB_MOQ_PORT, else 4443 (QUIC and WebTransport share it)."""
    try:
        return settings.value("TATOLAB_MOQ_PORT")
    except settings.SettingError as exc:
        raise ConfigError(str(exc)) from None


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
