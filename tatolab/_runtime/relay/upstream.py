"""The relay on the internet this machine joined (`tatolab relay join`), recorded in the state
folder so it holds across restarts."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

from tatolab._safe_fs import open_own_file, write_private_file

RECORD = "relay-upstream.json"


class BadRelayUrl(ValueError):
    pass


def check(url: str) -> str:
    """``url`` if it can name a MoQ relay: https://host[:port][/path][?token][#sha256=<fingerprint>]."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme != "https" or not parts.hostname:
        raise BadRelayUrl(f"{url!r} is not a relay's URL; give https://<host>[:<port>]/[<path>][?<token>], "
                          "with #sha256=<fingerprint> to pin a self-signed certificate")
    if parts.fragment and not (parts.fragment.startswith("sha256=") and len(parts.fragment) == 7 + 64):
        raise BadRelayUrl(f"{url!r}: the part after # must be sha256=<the certificate's 64 hex digits>")
    return url.strip()


def load(state: Path) -> str | None:
    try:
        fd = open_own_file(state / RECORD, os.O_RDONLY, "the joined relay's record")
    except FileNotFoundError:
        return None
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return check(json.loads(f.read())["url"])
        except (ValueError, KeyError, TypeError):
            return None


def save(state: Path, url: str | None) -> None:
    path = state / RECORD
    if url is None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        return
    write_private_file(path, json.dumps({"url": url}).encode(), "the joined relay's record")
