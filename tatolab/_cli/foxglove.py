"""`tatolab foxglove`: the link that opens the exposed outputs in the Foxglove app, live; with
``--play FILE.mcap``, a recording played under the app's own controls (seek, rate, pause)."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._cli.output import fail
from tatolab._control.client import Client

NOTE = "the link carries a token: whoever holds it sees these outputs; share it like a password"


def cmd_foxglove(args: argparse.Namespace) -> int:
    if args.play:
        return play(args.play, args.port)
    result = Client().request("foxglove", addresses=args.addresses)
    print(result["link"])
    print(f"WebSocket URL (Foxglove: Open connection > Foxglove WebSocket): {result['url']}")
    channels = result["channels"]
    print(f"{len(channels)} exposed output{'s' if len(channels) != 1 else ''}: {', '.join(channels) or 'none yet'}"
          f"; {NOTE}")
    return 0


def play(path: str, port: int) -> int:
    """Serve the recording at ``path`` until Ctrl-C, in this process."""
    import asyncio
    import secrets
    import threading
    from pathlib import Path

    from tatolab._runtime.foxglove.player import Player, summary
    from tatolab._runtime.foxglove.server import Hub, links

    file = Path(path).expanduser()
    if not file.is_file():
        return fail(f"no recording at {file}; give an MCAP file, like `tatolab foxglove --play rec.mcap`")
    try:
        channels, span = summary(file)
    except Exception as exc:  # noqa: BLE001 - the mcap library says a bad file in several ways
        return fail(f"cannot read {file} as MCAP: {exc}")
    token = secrets.token_urlsafe(24)
    hub = Hub(f"tatolab {file.name}", token, playback=span)
    player = Player(file, hub, span)
    hub.on_control = player.control
    for channel in channels:
        hub.channels[channel.id] = channel
    stop = asyncio.Event()

    def ready(bound: int) -> None:
        url, link = links("127.0.0.1", bound, token)
        print(link)
        print(f"WebSocket URL: {url}")
        print(f"playing {file} ({len(channels)} channels, {(span[1] - span[0]) / 1e9:.1f} s) under the app's "
              f"controls until Ctrl-C; {NOTE}", file=sys.stderr, flush=True)
        sys.stdout.flush()

    thread = threading.Thread(target=player.run, name="tatolab-foxglove-player", daemon=True)
    thread.start()
    try:
        asyncio.run(hub.serve("127.0.0.1", port, ready, stop))
    except OSError as exc:
        return fail(f"cannot listen on port {port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass
    finally:
        player.stop()
    return 0


def register(commands: Any) -> None:
    foxglove = add(commands, "foxglove")
    foxglove.add_argument("addresses", nargs="*", help="<stream>/<node>/<port> of outputs that must be served "
                                                       "(each is checked to be exposed)")
    foxglove.add_argument("--play", metavar="FILE.mcap", help="play a recording under the app's seek, rate and "
                                                              "pause controls (until Ctrl-C)")
    foxglove.add_argument("--port", type=int, default=0, help="with --play: the port (default: any free one)")
    foxglove.set_defaults(func=cmd_foxglove)
