"""The one place for the URL-safe rule and for addresses (``[<machine>/]<stream>/<node>/<port>``)."""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

from tatolab._errors import AddressError

_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._~")
# Names become file names (a kept stream's record, a ring in /dev/shm holds stream, node and
# port names together), which a file system caps at 255 bytes.
MAX_NAME_LENGTH = 100


def url_safe(name: str) -> str:
    """Lowercase ``name``, drop accents, and turn anything but letters, digits and ``-._~`` into ``-``.

    >>> url_safe("Caméra Avant")
    'camera-avant'
    """
    if not isinstance(name, str):
        raise AddressError(f"A name must be a string, not {type(name).__name__} ({name!r}).")
    decomposed = unicodedata.normalize("NFKD", name.lower())
    safe = "".join(
        ch if ch in _ALLOWED else "-"
        for ch in decomposed
        if not unicodedata.combining(ch)
    )
    # "." and ".." would be read as path steps in a URL.
    if safe in ("", ".", ".."):
        raise AddressError(
            f"The name {name!r} has nothing left once made URL-safe ({safe!r}); "
            "use letters or digits, e.g. 'camera-1'."
        )
    if len(safe) > MAX_NAME_LENGTH:
        raise AddressError(
            f"The name {safe[:40]!r}... is {len(safe)} characters long; a name has at most "
            f"{MAX_NAME_LENGTH} characters. Give a shorter one."
        )
    return safe


def as_argument(name: str) -> str:
    """How ``name`` is written after a `tatolab` command: a name that starts with ``-`` needs ``--`` first.

    >>> as_argument("-x")
    '-- -x'
    """
    return f"-- {name}" if name.startswith("-") else name


class Address(NamedTuple):
    """Where an output lives: ``[<machine>/]<stream>/<node>/<port>``."""

    machine: str | None
    stream: str
    node: str
    port: str

    def __str__(self) -> str:
        return format_address(self)


def parse_address(text: str) -> Address:
    """Parse ``stream/node/port`` or ``machine/stream/node/port``; each part is made URL-safe."""
    if not isinstance(text, str):
        raise AddressError(f"An address must be a string like 'motion_watcher/detector/motion', not {text!r}.")
    parts = text.strip().strip("/").split("/")
    if len(parts) not in (3, 4) or any(not part for part in parts):
        raise AddressError(
            f"{text!r} is not an address. Write <stream>/<node>/<port>, e.g. 'motion_watcher/detector/motion', "
            "or <machine>/<stream>/<node>/<port> for another machine."
        )
    safe = [url_safe(part) for part in parts]
    if len(safe) == 3:
        return Address(None, *safe)
    return Address(*safe)


def format_address(address: Address) -> str:
    parts = [address.stream, address.node, address.port]
    if address.machine:
        parts.insert(0, address.machine)
    return "/".join(parts)
