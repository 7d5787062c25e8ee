"""`tatolab exchange`: save the frames a video output carries (or one surface) as exact PNGs."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

    from tatolab._surfaces.frame import VideoFrame

from tatolab._control.client import Client
from tatolab._cli.commands import add
from tatolab._cli.arguments import seconds, whole_number
from tatolab._cli.output import fail
from tatolab._words import counted


def save(frame: VideoFrame, path: Path) -> None:
    from tatolab._surfaces import png
    from tatolab._surfaces.exchange import png_rows

    if not path.parent.is_dir():
        # --out names a folder that is not there yet: made at the first frame, so a failed exchange leaves none
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"exchange: made the folder {path.parent}", file=sys.stderr, flush=True)
    data = png.encode(frame.width, frame.height, png_rows(frame, "saves"))
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    os.replace(partial, path)


def _by_id(client: Client, surface_id: str, out: Path) -> int:
    from tatolab._surfaces import pool as surfaces
    from tatolab._surfaces.frame import VideoFrame

    answer = client.request("exchange", surface_id=surface_id)
    surfaces.configure(answer["pool"])
    try:
        frame = VideoFrame.open(surface_id)
    except surfaces.SurfaceError as exc:
        return fail(f"{exc}. `tatolab tap <stream>/<node>/<port> --count 1` shows a current surface_id")
    path = out / f"surface-{surface_id.replace('#', '-')}.png"
    save(frame, path)
    print(path, flush=True)
    return 0


def _from_output(client: Client, address: str, count: int, timeout: float | None, out: Path) -> int:
    # bags until --count frames are saved: one reused before it was read does not count
    from tatolab._surfaces import pool as surfaces
    from tatolab._surfaces.exchange import NotVideo, frame_in

    opened = client.request("exchange", address=address, count=None, timeout=timeout)
    name = opened["address"]
    surfaces.configure(opened["pool"])
    saved = stale = 0
    started = time.monotonic()
    for event in client.events():
        kind = event.get("event")
        if kind == "bag":
            try:
                frame = frame_in(event["bag"], name)
            except NotVideo as exc:
                return fail(f"{exc}. `tatolab tap` shows them")
            if frame is None:
                stale += 1
                continue
            path = out / f"{name.replace('/', '-')}-{frame.timestamp_ns}.png"
            save(frame, path)
            saved += 1
            print(path, flush=True)
            if saved >= count:
                print(f"exchange: saved {counted(saved, 'frame')} from {name} in "
                      f"{time.monotonic() - started:.1f} s", file=sys.stderr)
                return 0
        elif kind == "end":
            line = f"exchange: saved {counted(saved, 'frame')} from {name} in {time.monotonic() - started:.1f} s"
            if stale:
                line += f"; {counted(stale, 'frame')} had been reused before they could be read"
            print(line, file=sys.stderr)
            return 1
    return fail("the runtime went away during the exchange")


def cmd_exchange(args: argparse.Namespace) -> int:
    from tatolab._surfaces import pool as surfaces

    out = Path(args.out)
    blocking = next((part for part in (out, *out.parents) if part.exists() and not part.is_dir()), None)
    if blocking is not None:
        return fail(f"--out {out}: {blocking} is a file, not a folder; name a folder (it is made if missing)")
    if args.count < 1:
        return fail(f"--count must be 1 or more, not {args.count}")
    client = Client()
    try:
        if "#" in args.target:
            return _by_id(client, args.target, out)
        return _from_output(client, args.target, args.count, args.timeout or None, out)
    except surfaces.PoolExhausted as exc:  # no place left in the surface pool for this process
        return fail(f"exchange cannot read frames: {exc}")
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()


def register(commands: Any) -> None:
    exchange = add(commands, "exchange")
    exchange.add_argument("target", help="<stream>/<node>/<port>, or a surface_id such as 3#17")
    exchange.add_argument("--out", default=".", help="the folder to write PNGs to, made if missing (default: here)")
    exchange.add_argument("--count", type=whole_number(1, "a whole number of frames, 1 or more"), default=1,
                          help="how many frames to save (default 1)")
    exchange.add_argument("--timeout", type=seconds("a number of seconds, 0 or more (0: never)"), default=10.0,
                          help="stop after this many seconds (default 10; 0: never)")
    exchange.set_defaults(func=cmd_exchange)
