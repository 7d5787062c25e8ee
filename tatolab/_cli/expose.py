"""`tatolab expose`: let other streams (or other machines) read an output, or stop letting them."""

from __future__ import annotations

import argparse
from typing import Any

from tatolab._control.client import Client


# What each level means today. Nothing serves other machines yet: public is recorded, and the
# relay will serve it by URL once it exists; until then a public output reads like a private one.
MEANING = {
    "internal": "internal: only its own stream reads it",
    "private": "private: other streams on this machine can read it",
    "public": ("public: other streams on this machine can read it now; public is recorded, and readers "
               "on other machines will read it by URL once the relay serves this machine (nothing "
               "serves other machines yet)"),
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
    level.add_argument("--public", action="store_true",
                       help="readers on other machines too, by URL, once the relay serves them (recorded now)")
    level.add_argument("--remove", action="store_true", help="make it internal again, cutting other streams' readers")
    expose.set_defaults(func=cmd_expose)
