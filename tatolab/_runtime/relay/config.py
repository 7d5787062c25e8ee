"""Where the relay listens: loopback for every exposed output, and for public ones also the
machine's tailnet addresses (or those set in TATOLAB_MOQ_PUBLIC); nothing else."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess

DEFAULT_PORT = 4443
LOOPBACK = "127.0.0.1"


class ConfigError(ValueError):
    pass


def port() -> int:
    """The relay's UDP port: TATOLAB_MOQ_PORT, else 4443 (QUIC and WebTransport share it)."""
    text = os.environ.get("TATOLAB_MOQ_PORT", "")
    if not text:
        return DEFAULT_PORT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 65536:
        raise ConfigError(f"TATOLAB_MOQ_PORT={text!r} is not a port; set it to a number from 1 to 65535, or unset it")
    return value


def public_addresses() -> list[str]:
    """The addresses public outputs are also served on: TATOLAB_MOQ_PUBLIC (comma-separated IP
    addresses; empty: none), else the machine's Tailscale addresses, else none."""
    text = os.environ.get("TATOLAB_MOQ_PUBLIC")
    if text is not None:
        found = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            try:
                found.append(str(ipaddress.ip_address(part)))
            except ValueError:
                raise ConfigError(f"TATOLAB_MOQ_PUBLIC has {part!r}, which is not an IP address; give the "
                                  "machine's tailnet or LAN addresses, comma-separated, or leave it empty") from None
        return found
    return tailscale_addresses()


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
