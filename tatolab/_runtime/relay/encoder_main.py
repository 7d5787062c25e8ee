"""The MoQ relay's H.264 encoder in a process of its own, started by the runtime (encoding.py):
``python -m tatolab._runtime.relay.encoder_main POOL RUNTIME_PID`` (or ``--parameter-sets W H``).

FFmpeg (and a hardware encoder's driver) runs here, never in ``tatolabd``: a crash in it ends this
process only, and the runtime starts another. It reads requests on stdin, each a little-endian u32
length and a video bag as the ring carries it (msgpack, naming a surface in the pool ``POOL``); it
leases that surface from the pool itself, as a node does, and answers on stdout with a u32 length
and a msgpack map: ``{"packets": [[access unit, timestamp µs, keyframe], ...], "frames": n,
"skipped": n, "name": encoder}``, or ``{"error": why}`` when no H.264 encoder opens here.
"""

from __future__ import annotations

import os
import sys

import msgspec

from tatolab._host.orphans import die_with_parent

LENGTH = 4


def _read(stream: object, size: int) -> bytes:
    data = stream.read(size)  # type: ignore[attr-defined]
    return data if len(data) == size else b""


def parameter_sets(width: int, height: int) -> None:
    """``--parameter-sets W H``: write the SPS/PPS the encoder sends for that size to stdout (the
    catalog's seed); why none opens goes to stderr, with exit status 1."""
    from tatolab._runtime.relay.video import Encoder

    try:
        data = Encoder("").parameter_sets(width, height)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.buffer.write(data)


def main() -> None:
    if sys.argv[1] == "--parameter-sets":
        die_with_parent()
        parameter_sets(int(sys.argv[2]), int(sys.argv[3]))
        return
    pool_base, runtime_pid = sys.argv[1], int(sys.argv[2])
    die_with_parent()  # the relay's thread that started it; the runtime's death ends it too
    if os.getppid() != runtime_pid:
        return  # the runtime died before the line above
    from tatolab._runtime.relay.video import Encoder  # PyAV loads here, in this process alone

    encoder = Encoder(pool_base)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    print(f"H.264 encoder process started (pid {os.getpid()})", file=sys.stderr, flush=True)
    try:
        while True:
            head = _read(requests, LENGTH)
            if not head:
                return  # the runtime closed our stdin: nobody watches any more
            payload = _read(requests, int.from_bytes(head, "little"))
            try:
                packets = encoder.encode(payload)
                answer = {"packets": packets, "frames": encoder.frames, "skipped": encoder.skipped,
                          "name": encoder.name}
            except RuntimeError as exc:  # no H.264 encoder opens on this machine: said, not retried
                answer = {"error": str(exc)}
            data = msgspec.msgpack.encode(answer)
            answers.write(len(data).to_bytes(LENGTH, "little") + data)
            answers.flush()
    finally:
        encoder.dispose()


if __name__ == "__main__":
    main()
