"""The machine's name, the first part of a full address: TATOLAB_MACHINE_NAME if set, else its
Tailscale name, else its hostname."""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess

from tatolab import _settings as settings
from tatolab._naming import url_safe


def tailscale_name(status: dict) -> str | None:
    """The machine name from ``tailscale status --json`` output, if it is on a tailnet."""
    me = status.get("Self") or {}
    dns = (me.get("DNSName") or "").rstrip(".")
    if dns:
        return dns.split(".")[0]
    return me.get("HostName") or None


@functools.lru_cache(maxsize=1)
def machine_name() -> str:
    given = settings.value("TATOLAB_MACHINE_NAME")  # checked as tatolabd started (_settings.py)
    if given:
        return url_safe(given)
    if shutil.which("tailscale"):
        try:
            done = subprocess.run(
                ["tailscale", "status", "--json"], capture_output=True, text=True, timeout=2, check=True
            )
            name = tailscale_name(json.loads(done.stdout))
            if name:
                return url_safe(name)
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    return url_safe(socket.gethostname().split(".")[0])
