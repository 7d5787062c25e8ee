"""`tatolab expose`: let other streams (or other machines) read an output, or stop letting them."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._control.client import Client


MEANING = {
    "internal": "internal: only its own stream reads it",
    "private": "private: other streams and tools on this machine can read it (`tatolab url` gives its URL)",
    "public": ("public: your other machines can read it by URL too, over your tailnet "
               "(`tatolab url` gives its URL)"),
}


def cmd_expose(args: argparse.Namespace) -> int:
    level = "internal" if args.remove else "public" if args.public else "private"
    result = Client().request("expose", address=args.address, level=level)
    print(f"{result['address']} is {MEANING[level]}" + (" (recorded for the kept stream)" if result["kept"] else ""))
    if result["cut"]:
        print(f"cut readers: {', '.join(result['cut'])}")
    return 0


def register(commands: Any) -> None:
    expose = commands.add_parser("expose", help="change who may read an output: <stream>/<node>/<port>")
    expose.add_argument("address", help="<stream>/<node>/<port> (or <machine>/<stream>/<node>/<port>)")
    level = expose.add_mutually_exclusive_group()
    level.add_argument("--public", action="store_true", help="readers on your other machines too, by URL")
    level.add_argument("--remove", action="store_true",
                       help="make it internal again, cutting other streams' and network readers")
    expose.set_defaults(func=cmd_expose)
    url = commands.add_parser("url", help="print an exposed output's MoQ URL and the certificate fingerprint")
    url.add_argument("address", help="<stream>/<node>/<port>")
    url.add_argument("--open", action="store_true", help="open the viewer page showing it, in a browser")
    url.set_defaults(func=cmd_url)
    relay = commands.add_parser("relay", help="publish this machine's public outputs into a MoQ relay on the internet")
    actions = relay.add_subparsers(dest="action", metavar="ACTION")
    join = actions.add_parser("join", help="publish public outputs into the relay at URL (recorded)")
    join.add_argument("url", help="https://<host>[:<port>]/[<path>][?<token>][#sha256=<fingerprint>]")
    actions.add_parser("leave", help="stop publishing into the joined relay, and forget it")
    relay.set_defaults(func=cmd_relay, action=None)


def cmd_url(args: argparse.Namespace) -> int:
    result = Client().request("url", address=args.address)
    print(result["url"])
    print(f"fingerprint sha-256 {result['fingerprint']}")
    print(f"pinned, for stream_builder.remote_output(): {result['url']}#sha256={result['fingerprint']}")
    print(f"viewer: {result['viewer']}")
    if args.open:
        import webbrowser

        if not webbrowser.open(result["viewer"]):
            print("no browser could be started here; open the viewer's address in one on this machine")
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    if args.action == "join":
        result = Client().request("relay_join", url=args.url)
    elif args.action == "leave":
        result = Client().request("relay_leave")
    else:
        result = Client().request("relay_status")
    print(f"relay: {result['url']} ({result['state']})" if result["url"] else "relay: none joined")
    return 0
