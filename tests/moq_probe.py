"""What a MoQ client (moq-rs, no tatolab code) gets from a relay, tried several ways in one process:
read a broadcast, list the announcements, publish one. Run as its own process (as another Unix
user, or in another network namespace) by tests/test_sharing.py.

    python moq_probe.py FINGERPRINT MODE URL [MODE URL ...]    (MODE: read | list | publish)

A URL ``huge:<url>`` is tried as ``<url>?jwt=`` and a 1 MB token (too long for a command line).

It prints one JSON line per try: {"mode", "url" (without its token), "outcome", ...}. Outcomes:
"refused" (the relay closed the session as unauthorized), "read" (a bag came), "listed" (with the
paths announced), "nothing" (connected, but nothing came within the wait), "published" (the
session stayed up), "error: ..." (it could not connect at all).
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.parse

import moq
import moq.errors

WAIT_S = 4.0


def shown(url: str) -> str:
    return url.split("?", 1)[0]


async def attempt(mode: str, url: str, fingerprint: str) -> dict:
    if url.startswith("huge:"):
        url = url[5:] + "?jwt=" + "a" * 1_000_000
    path = urllib.parse.urlsplit(url).path.strip("/")
    origin = moq.OriginProducer() if mode == "publish" else None
    if origin is not None:
        broadcast = origin.create_broadcast(path or "planted")
        track = broadcast.publish_track("bags")
        broadcast.announce()
    try:
        async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False, reconnect=False,
                              publish=origin) as client:
            closed = asyncio.ensure_future(client.session.closed())
            if mode == "read":
                work = asyncio.ensure_future(_read(client, path))
            elif mode == "list":
                work = asyncio.ensure_future(_list(client))
            else:
                track.write_frame(b"\x80", 0)
                work = asyncio.ensure_future(asyncio.sleep(WAIT_S, {"outcome": "published"}))
            done, _ = await asyncio.wait({closed, work}, timeout=WAIT_S + 1, return_when=asyncio.FIRST_COMPLETED)
            if closed in done:
                work.cancel()
                exc = closed.exception()
                if exc is not None and moq.errors.is_auth(exc):
                    return {"outcome": "refused"}
                return {"outcome": f"closed: {exc}"}
            closed.cancel()
            if not done:
                work.cancel()
                return {"outcome": "nothing"}
            return work.result()
    except moq.Error as exc:
        if moq.errors.is_auth(exc):
            return {"outcome": "refused"}
        return {"outcome": f"error: {str(exc)[:200]}"}


async def _read(client: moq.Client, path: str) -> dict:
    broadcast = await client.announced_broadcast(path).available()
    track = await broadcast.subscribe_track("bags", moq.Subscription(max_age_us=10_000_000))
    frame = await track.read_frame()
    return {"outcome": "read" if frame is not None else "nothing"}


async def _list(client: moq.Client) -> dict:
    seen: list[str] = []
    try:
        async with asyncio.timeout(WAIT_S):
            async for update in client.announced(""):
                path = update.prefix if hasattr(update, "prefix") else str(update)
                # each path once: an output's broadcast is made anew once its readers left (feed.py)
                if getattr(update, "active", True) and path not in seen:
                    seen.append(path)
    except TimeoutError:
        pass
    return {"outcome": "listed" if seen else "nothing", "paths": seen}


async def main(fingerprint: str, pairs: list[str]) -> None:
    for mode, url in zip(pairs[::2], pairs[1::2]):
        result = await attempt(mode, url, fingerprint)
        print(json.dumps({"mode": mode, "url": shown(url), **result}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
