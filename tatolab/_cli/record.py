"""`tatolab record`: outputs into an MCAP file, by a recorder the runtime starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._cli.arguments import seconds, whole_number
from tatolab._control.client import Client
from tatolab._cli.output import fail
from tatolab._words import counted


def size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def summary_lines(row: dict[str, Any]) -> list[str]:
    """What a recording wrote, one line per address (the CLI's and the summary's words)."""
    if row["state"] != "ended":
        state, verb = "so far", "recording"
    else:
        verb = "recorded"
        state = "indexed" if row.get("indexed", True) else "not indexed: readable up to its last chunk"
        if row.get("readable") is False:
            state = "no message in it: the disk was full before its first chunk"
    lines = [f"{verb} {row['seconds']:.1f} s to {row['path']} ({size(row['bytes'])}, {state})"]
    if row.get("reason") and row["reason"] not in ("stopped", "seconds", "bags"):
        lines[0] += f"; ended: {row['reason']}" + (" (an earlier run of the runtime)" if row.get("earlier_run") else "")
    width = max(len(a) for a in row["channels"])
    for address, c in row["channels"].items():
        kind = f" ({c['kind']})" if c.get("kind") else ""
        line = f"  {address:<{width}}  {counted(c['bags'], 'bag')}{kind}, {c['dropped']} dropped, {size(c['bytes'])}"
        lines.append(line + (f"; {c['error']}" if c.get("error") else ""))
    for file in row.get("files") or []:
        if "triggers" in file:  # a window's
            lines.append(f"  window {file['path']}: {file['triggers']} trigger{'s' if file['triggers'] != 1 else ''}, "
                         f"{counted(file['bags'], 'bag')}, {(file['to_ns'] - file['from_ns']) / 1e9:.1f} s"
                         f"{'' if file['state'] == 'done' else ' (writing)'}"
                         f"{'; its start was cut by --max-mb' if file.get('cut_by_max_mb') else ''}")
        else:  # a split's
            lines.append(f"  file {file['path']}: {counted(file['bags'], 'bag')}"
                         f"{', ' + size(file['bytes']) if 'bytes' in file else ''}"
                         f"{'' if file['state'] == 'done' else ' (writing)'}")
    lines += [f"  {line}" for line in cut_lines(row)]
    ring = row.get("ring")
    if ring:
        lines.append(f"  ring: {size(ring['bytes'])} of {size(ring['max_bytes'])}, {ring['seconds']:.1f} s held")
    if row.get("error"):
        lines.append(f"  {row['error']}")
    return lines


def cut_lines(row: dict[str, Any]) -> list[str]:
    """Where each file of a recording that was not finished ends for a reader."""
    import time

    lines = []
    for cut in row.get("cut") or []:
        if cut.get("missing"):
            lines.append(f"{cut['path']}: gone")
        elif cut.get("indexed"):
            lines.append(f"{cut['path']}: finished and indexed after all")
        elif cut.get("last_ns"):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(cut["last_ns"] / 1e9))
            millis = int(cut["last_ns"] // 1_000_000 % 1000)
            lines.append(f"{cut['path']}: cut; readable as it is up to {stamp}.{millis:03d} "
                         f"({counted(cut['messages'], 'message')} in {counted(cut['chunks'], 'whole chunk')}, "
                         f"{size(cut['bytes'])}); what came after that is lost")
        else:
            lines.append(f"{cut['path']}: cut before its first chunk: nothing to read")
    return lines


def duration(text: str) -> float:
    """30, 30s, 2m, 500ms: seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit):
            number, scale = text[:-len(unit)], units[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e9:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give a duration like 30s, 2m or 500ms")
    return value


def cmd_record(args: argparse.Namespace) -> int:
    if args.list:
        rows = Client().request("recordings")
        for row in rows:
            print(f"{row['id']} {row['state']}: " + "\n".join(summary_lines(row)))
        if not rows:
            print("no recordings")
        return 0
    if args.trigger:
        row = Client().request("record_trigger", id=args.trigger)
        print(f"triggered {args.trigger}")
        print("\n".join(summary_lines(row)))
        return 0
    if args.stop:
        row = Client().request("record_stop", id=args.stop)
        print("\n".join(summary_lines(row)))
        return 0
    if not args.addresses or not args.out:
        return fail("record needs the outputs' addresses and --out FILE.mcap, like "
                    "`tatolab record cam/camera/video --out cam.mcap`")
    out = Path(args.out).expanduser().absolute()
    row = Client().request("record_start", addresses=args.addresses, out=str(out), seconds=args.seconds,
                           bags=args.bags, compression=args.compression, profile=args.profile,
                           video=args.video, on=args.on, when=args.when, before=args.before, after=args.after,
                           max_mb=args.max_mb, split_mb=args.split_mb, split_seconds=args.split_seconds)
    rid = row["id"]
    until = " or ".join(filter(None, [f"{args.seconds:g} s" if args.seconds else "",
                                      f"{counted(args.bags, 'bag')}" if args.bags else ""]))
    kept = f" ({row['asked']} is there already: never overwritten)" if row.get("asked") else ""
    if args.detach:
        print(f"recording {rid}: {', '.join(row['addresses'])} -> {row['path']}{kept}; "
              f"`tatolab record --stop {rid}` stops it")
        return 0
    print(f"recording {rid}: {', '.join(row['addresses'])} -> {row['path']}{kept} "
          f"(until {until + ' or ' if until else ''}Ctrl-C)", file=sys.stderr, flush=True)
    client = Client()
    try:
        client.request("record_watch", id=rid, stop_on_hangup=True)
        end = None
        for event in client.events():
            if event.get("event") == "end":
                end = event["recording"]
                break
        if end is None:
            return fail("the runtime went away during the recording")
    except KeyboardInterrupt:
        print("stopping: finishing the file (Ctrl-C again leaves that to the runtime)", file=sys.stderr, flush=True)
        try:
            end = Client().request("record_stop", id=rid)
        except KeyboardInterrupt:
            print(f"the runtime finishes {row['path']} on its own", file=sys.stderr)
            return 130
    finally:
        client.close()
    print("\n".join(summary_lines(end)))
    return 0 if end.get("indexed", True) else 1


def register(commands: Any) -> None:
    record = add(commands, "record")
    record.add_argument("addresses", nargs="*", help="<stream>/<node>/<port> of each output to record")
    record.add_argument("--out", help="the MCAP file to write (its folder is made; a file there is never overwritten: the next free "
                        "name, FILE-0001.mcap...)")
    record.add_argument("--seconds", type=seconds("a number of seconds above 0"), help="stop after this many seconds")
    record.add_argument("--bags", type=whole_number(1, "a whole number of bags, 1 or more"),
                        help="stop after this many bags in all")
    record.add_argument("--compression", choices=("zstd", "lz4", "none"), default="zstd",
                        help="chunk compression (default zstd; lz4 is lighter on the CPU for frames)")
    record.add_argument("--profile", choices=("ordered", "newest"), default="ordered",
                        help="ordered (default): every bag until lapped; newest: the latest each time")
    record.add_argument("--video", choices=("auto", "h264", "raw"), default="auto",
                        help="frames as H.264 (foxglove.CompressedVideo, encoded by the recorder) or raw "
                             "(foxglove.RawImage); auto (default): H.264 above 640x360")
    record.add_argument("--before", type=duration, metavar="DURATION",
                        help="keep this long in memory (default 30s) and write it before each trigger, to numbered "
                             "files (OUT-1.mcap...)")
    record.add_argument("--after", type=duration, metavar="DURATION", help="write this long after each trigger "
                                                                            "(default 10s)")
    record.add_argument("--on", metavar="TRIGGER_ADDRESS", help="the output whose bags are triggers")
    record.add_argument("--when", metavar="EXPR", help="which trigger bags count, e.g. 'score > 0.8'")
    record.add_argument("--max-mb", type=float, default=512.0, help="the most memory the before-ring holds "
                                                                     "(default 512)")
    record.add_argument("--split-mb", type=float, metavar="MB", help="a new numbered file (OUT-1.mcap, OUT-2.mcap...) "
                                                                      "each time one passes this size")
    record.add_argument("--split-seconds", type=duration, metavar="DURATION",
                        help="a new numbered file each time one is this long")
    record.add_argument("--trigger", metavar="ID", help="a trigger now for recording ID (started with --before/--after)")
    record.add_argument("--detach", action="store_true", help="leave it recording in the runtime; --stop ends it")
    record.add_argument("--stop", metavar="ID", help="stop recording ID (as --list or --detach names it)")
    record.add_argument("--list", action="store_true", help="the recordings in progress and the last ended ones")
    record.set_defaults(func=cmd_record)
