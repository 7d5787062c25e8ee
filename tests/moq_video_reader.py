"""A plain MoQ client (moq-rs and PyAV, no tatolab code) that watches a video output as moq-dev's
players do: the broadcast's catalog, then the H.264 track it lists, decoded with FFmpeg.

    python moq_video_reader.py URL FINGERPRINT COUNT [--timeout S] [--hold-s S]

It prints one JSON line per event: {"connected": ...}, {"catalog": {track: {codec, width, height}}},
{"frame": n, "bytes": n, "keyframe": b}, {"picture": {"width", "height", "bars": [[r, g, b], ...]}}
(the colour at the middle of each of 8 bars, from the last decoded picture) and, at the end,
{"end": why, "got": n}. With --hold-s it stays subscribed that long after COUNT frames.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.parse

import av
import moq


def say(**fields: object) -> None:
    print(json.dumps(fields, default=str), flush=True)


async def main(args: argparse.Namespace) -> str:
    path = urllib.parse.urlsplit(args.url).path.strip("/")
    async with moq.Client(args.url, tls_fingerprints=[args.fingerprint], websocket_enabled=False,
                          reconnect=False) as client:
        say(connected=args.url)
        broadcast = await asyncio.wait_for(client.announced_broadcast(path), args.timeout)
        catalog = await asyncio.wait_for(broadcast.catalog(), args.timeout)
        say(catalog={name: {"codec": v.codec, "width": v.coded.width if v.coded else None,
                            "height": v.coded.height if v.coded else None}
                     for name, v in catalog.video.items()})
        if not catalog.video:
            return "no video in the catalog"
        name, rendition = next(iter(catalog.video.items()))
        media = await broadcast.subscribe_media(name, rendition)
        decoder = av.CodecContext.create("h264", "r")
        got, picture = 0, None
        while got < args.count:
            frame = await asyncio.wait_for(anext(media), args.timeout)
            got += 1
            say(frame=got, bytes=len(frame.payload), keyframe=frame.keyframe, ts_us=frame.timestamp_us)
            if not frame.payload:
                continue  # moq-py yields an empty frame where a group ends; FFmpeg reads one as end of stream
            for decoded in decoder.decode(av.Packet(frame.payload)):
                picture = decoded.to_ndarray(format="rgb24")
        if picture is None:
            return "nothing decoded"
        height, width, _ = picture.shape
        row = height // 4  # the bars fill the top of the picture
        bars = [[int(c) for c in picture[row, int((i + 0.5) * width / 8)]] for i in range(8)]
        say(picture={"width": width, "height": height, "bars": bars})
        if args.hold_s:
            end = asyncio.get_running_loop().time() + args.hold_s
            while asyncio.get_running_loop().time() < end:
                await asyncio.wait_for(anext(media), args.timeout)
        # said before the client closes: a loaded machine once saw the process end inside moq's close, saying nothing
        say(end="count", got=got)
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("fingerprint")
    parser.add_argument("count", type=int)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--hold-s", type=float, default=0.0)
    args = parser.parse_args()
    try:
        why = asyncio.run(main(args))
    except (asyncio.TimeoutError, TimeoutError):
        why = "timeout"
    except moq.Error as exc:
        why = f"error: {exc}"
    if why is not None:
        say(end=why)
    sys.stdout.flush()
    os._exit(0)  # what it read is said; nothing of moq's teardown can change the answer
