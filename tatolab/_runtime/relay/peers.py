"""Which user owns the other end of a loopback TCP connection (Linux: ``/proc/net/tcp``, ``tcp6``).

The kernel lists every TCP socket of the network namespace with the uid of the user who made it; the
connection's client side is the line whose local address is the peer's and remote address ours. So
the viewer page gives a one-use code's token only to a browser of the runtime's own user, whoever
else read the code (it was on a command line)."""

from __future__ import annotations

import socket
import struct

TABLES = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}


def _hex(host: str, port: int) -> tuple[socket.AddressFamily, str, str]:
    """(family, address, port) as ``/proc/net/tcp*`` writes them: the address in 32-bit words of host order."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    packed = socket.inet_pton(family, host.split("%")[0])
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return family, "".join(f"{w:08X}" for w in words), f"{port:04X}"


def peer_uid(peer: tuple, local: tuple) -> int | None:
    """The uid owning the client socket of the connection from ``peer`` to ``local`` (the
    ``getpeername``/``getsockname`` pairs); None when it cannot be told (not Linux, not found)."""
    try:
        family, peer_host, peer_port = _hex(peer[0], peer[1])
        _, local_host, local_port = _hex(local[0], local[1])
        with open(TABLES[family], encoding="ascii") as table:
            next(table)
            for line in table:
                fields = line.split()
                if fields[1] == f"{peer_host}:{peer_port}" and fields[2] == f"{local_host}:{local_port}":
                    # a socket its process closed already has no inode, and the kernel lists it as uid 0: nobody's
                    return int(fields[7]) if fields[9] != "0" else None
    except (OSError, ValueError, IndexError, KeyError, StopIteration):
        return None
    return None
