"""`tatolab expose`: let other streams (or other machines) read an output, or stop letting them."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the CLI's start)
if TYPE_CHECKING:
    from typing import Any

from tatolab._cli.commands import add
from tatolab._control.client import Client
from tatolab._control.words import CAPABILITY, UNREACHABLE, expiry


MEANING = {
    "internal": "internal: only its own stream reads it",
    "private": "private: other streams and tools on this machine can read it (`tatolab url` gives its URL)",
    "public": ("public: your other machines can read it by URL too, over your tailnet "
               "(`tatolab url` gives its URL)"),
}


def cmd_expose(args: argparse.Namespace) -> int:
    level = "internal" if args.remove else "public" if args.public else "private"
    result = Client().request("expose", address=args.address, level=level)
    print(exposed_line(result, level))
    if result["cut"]:
        print(f"cut readers: {', '.join(result['cut'])}")
    return 0


def exposed_line(result: dict[str, Any], level: str) -> str:
    """What `expose` did, in one line that is true: a public output nothing outside can reach yet
    is said to be public, and unreachable, never also readable by the other machines."""
    kept = " (recorded for the kept stream)" if result["kept"] else ""
    if level == "public" and result.get("reachable") is False:
        return f"{result['address']} is public{kept}, but {UNREACHABLE}"
    return f"{result['address']} is {MEANING[level]}{kept}"


def register(commands: Any) -> None:
    expose = add(commands, "expose")
    expose.add_argument("address", help="<stream>/<node>/<port> (or <machine>/<stream>/<node>/<port>)")
    level = expose.add_mutually_exclusive_group()
    level.add_argument("--public", action="store_true", help="readers on your other machines too, by URL")
    level.add_argument("--remove", action="store_true",
                       help="make it internal again, cutting other streams' and network readers")
    expose.set_defaults(func=cmd_expose)
    url = add(commands, "url")
    url.add_argument("address", help="<stream>/<node>/<port> (with --prefix: <stream> or <stream>/<node>)")
    url.add_argument("--public", action="store_true",
                     help="mint a new token for others to read this public output (revocable: tatolab token)")
    url.add_argument("--expires", default="7d", metavar="WHEN",
                     help="with --public: how long the token lasts: 1h, 7d (the default), 30m or never")
    url.add_argument("--prefix", action="store_true",
                     help="with --public: the token reads every public output at or under ADDRESS")
    url.add_argument("--open", action="store_true", help="open the viewer page showing it, in a browser "
                     "(by a one-use link: no token on the browser's command line)")
    url.set_defaults(func=cmd_url)
    token = add(commands, "token")
    token_actions = token.add_subparsers(dest="action", metavar="ACTION")
    token_actions.add_parser("list", help="list the tokens: your URLs' and the public ones (ids, what they read, "
                             "expiry, state)")
    revoke = token_actions.add_parser("revoke", help="void one token now (a public one or your URL's), cutting its "
                                      "readers")
    revoke.add_argument("id", help="the token's id (tatolab token list)")
    token_actions.add_parser("rotate", help="a new key: every URL given so far stops working, readers are cut")
    token.set_defaults(func=cmd_token, action=None)
    relay = add(commands, "relay")
    actions = relay.add_subparsers(dest="action", metavar="ACTION")
    join = actions.add_parser("join", help="publish public outputs into the relay at URL (recorded)")
    join.add_argument("url", help="https://<host>[:<port>]/[<path>][?jwt=<token>][#sha256=<fingerprint>]")
    join.add_argument("--token", help="the relay's token (a JWT), if the URL has no ?jwt=")
    actions.add_parser("leave", help="stop publishing into the joined relay, and forget it")
    relay.set_defaults(func=cmd_relay, action=None)


def cmd_url(args: argparse.Namespace) -> int:
    result = Client().request("url", address=args.address, public=args.public, expires=args.expires,
                              prefix=args.prefix, open=args.open)
    print(result["url"])
    print(f"fingerprint sha-256 {result['fingerprint']}")
    print(f"pinned, for stream_builder.remote_output(): {result['url']}#sha256={result['fingerprint']}")
    print(f"viewer: {result['viewer']}")
    minted = result.get("token")
    if minted:
        print(f"token {minted['id']}: reads public outputs at {minted['root']}"
              f"{' and under it' if args.prefix else ''}, {expiry(minted['expires'])}; "
              f"`tatolab token revoke {minted['id']}` voids it. {CAPABILITY}")
    elif result["level"] == "public":
        print(f"this URL is yours (it never expires); for others: `tatolab url {args.address} --public`")
    if args.open:
        import webbrowser

        # a browser's command line is every user's to read: it gets a one-use code, never the token
        if not webbrowser.open(result["open"]):
            print("no browser could be started here; open the viewer's address in one on this machine")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    client = Client()
    if args.action == "revoke":
        record = client.request("token_revoke", id=args.id)
        print(f"token {record['id']} revoked: URLs carrying it read nothing now")
    elif args.action == "rotate":
        rotated = client.request("token_rotate")
        print(f"new token key {rotated['key']}: every URL given so far stopped working "
              f"({rotated['revoked']} public token(s) voided); `tatolab url` gives new ones")
    else:
        tokens = client.request("token_list")["tokens"]
        if not tokens:
            print("no tokens (`tatolab url ADDRESS` makes your own URL, `--public` mints one for others)")
        for t in tokens:
            when = f"  {expiry(t['expires'])}" if t["state"] == "valid" else ""
            whose = "  (your URL)" if t.get("lvl") == "private" else ""
            print(f"{t['id']}  {t['root']}{'/*' if t.get('note') == 'prefix' else ''}  {t['state']}{when}{whose}")
    client.close()
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    if args.action == "join":
        result = Client().request("relay_join", url=args.url, token=args.token)
    elif args.action == "leave":
        result = Client().request("relay_leave")
    else:
        result = Client().request("relay_status")
    print(f"relay: {result['url']} ({result['state']})" if result["url"] else "relay: none joined")
    return 0
