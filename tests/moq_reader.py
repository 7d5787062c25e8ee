"""A plain MoQ client (moq-rs, no tatolab code) that reads an output by its URL, run as its own
process so a test can watch it, stop it, or run it in another network namespace.

    python moq_reader.py URL FINGERPRINT COUNT [--idle-s S] [--hold-s S] [--timeout S] [--summary] [--slow-ms MS]
                         [--max-age-s S] [--until FILE]

It reads each group's bags in order, then the next group (the relay puts up to 100 ms of bags in a
group, numbered by its first bag's number). It prints one JSON line per event: {"connected": ...},
{"bag": <decoded bag>, "bytes": n}, {"missed": n, "at": bag number} (a group's number says bags
never came), with --summary no line per bag but {"summary": {got, first, last, missing, out_of_order}}
(of the bags' own "n") at the end,
{"received_before_subscribe": n}, {"holding": n} (COUNT bags read, or --until's file there, the session kept open for
--hold-s) and, at the end, {"end": why, "got": n}; a session the relay
refuses for its token ends {"end": "refused: unauthorized"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.parse

import moq
import moq.errors
import msgspec


def say(**fields: object) -> None:
    print(json.dumps(fields, default=lambda v: {"$bytes": len(v)} if isinstance(v, bytes) else str(v)), flush=True)


async def main(args: argparse.Namespace) -> str:
    path = urllib.parse.urlsplit(args.url).path.strip("/")
    async with moq.Client(args.url, tls_fingerprints=[args.fingerprint], websocket_enabled=False,
                          reconnect=False) as client:
        say(connected=args.url)
        if args.idle_s:
            await asyncio.sleep(args.idle_s)  # connected, subscribed to nothing: nothing may come
            say(received_before_subscribe=client.session.stats().bytes_received)
        # a relay that refuses the session (no token, or the wrong one) closes it: say so, never hang
        closed = asyncio.ensure_future(client.session.closed())
        announced = asyncio.ensure_future(client.announced_broadcast(path).available())
        done, _ = await asyncio.wait({closed, announced}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED)
        if closed in done:
            announced.cancel()
            exc = closed.exception()
            if exc is not None and moq.errors.is_auth(exc):
                return "refused: unauthorized"
            return f"closed: {exc}"
        if not done:
            raise TimeoutError
        broadcast = announced.result()
        # every bag, in order (without a staleness allowance, a group that arrives late is skipped)
        track = await broadcast.subscribe_track("bags", moq.Subscription(max_age_us=int(args.max_age_s * 1e6)))
        say(subscribed=path)
        got = 0
        group = None
        expected: int | None = None  # the next bag's number: a group is numbered by its first bag's
        ns: list[int] = []
        try:
            while got < args.count and not (args.until and got % 100 == 0 and os.path.exists(args.until)):
                # each group's bags in order, then the next group (moq skips a group that comes late)
                try:
                    async with asyncio.timeout(args.timeout):  # (no task a bag, as wait_for makes)
                        frame = await group.read_frame() if group is not None else None
                except moq.Error:  # the group was cut short: the next group's number says how much
                    frame = None
                if frame is None:
                    group = await asyncio.wait_for(track.next_group(), args.timeout)
                    if group is None:
                        return "track ended"
                    if expected is not None and group.sequence != expected:
                        say(missed=group.sequence - expected, at=expected)
                    expected = group.sequence
                    continue
                got += 1
                expected = (expected or 0) + 1
                bag = msgspec.msgpack.decode(frame.payload)
                if args.summary:
                    ns.append(bag["n"])
                else:
                    say(bag=bag, bytes=len(frame.payload), ts_us=frame.timestamp_us)
                if args.slow_ms:
                    await asyncio.sleep(args.slow_ms / 1000)
        finally:
            if args.summary and ns:
                # the bags' own numbers: how many of the run from the first to the last never came
                say(summary={"got": len(ns), "first": ns[0], "last": ns[-1], "missing": ns[-1] - ns[0] + 1 - len(set(ns)),
                             "out_of_order": sum(1 for a, b in zip(ns, ns[1:]) if b <= a)})
        if args.hold_s:
            say(holding=got)
            await asyncio.sleep(args.hold_s)
        return "count"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("fingerprint")
    parser.add_argument("count", type=int)
    parser.add_argument("--idle-s", type=float, default=0.0)
    parser.add_argument("--hold-s", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--max-age-s", type=float, default=10.0, help="how late a group may come and still be read")
    parser.add_argument("--summary", action="store_true", help="no line per bag: one summary line of them at the end")
    parser.add_argument("--until", default="", help="read until this file exists (COUNT bags at most), then end as with COUNT")
    parser.add_argument("--slow-ms", type=float, default=0.0, help="sleep this long after each bag (a reader that falls behind)")
    args = parser.parse_args()
    try:
        why = asyncio.run(main(args))
    except (asyncio.TimeoutError, TimeoutError):
        why = "timeout"
    except moq.Error as exc:
        why = f"error: {exc}"
    say(end=why)
    sys.exit(0)
