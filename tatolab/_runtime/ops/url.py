"""`tatolab url`: where an exposed output is served over MoQ, with a token that lets its holder
read it, and the certificate to pin; `tatolab token`: the public tokens minted, revoking one,
rotating the key."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError, Fix
from tatolab._runtime.machine import machine_name
from tatolab._runtime.ops import op
from tatolab._runtime.ops.addresses import exposed_output
from tatolab._runtime.ops.relay import served_relay
from tatolab._runtime.relay.tokens import parse_expiry
from tatolab._runtime.relay.wanted import TRACK
from tatolab._runtime.runtime import Runtime


class Url(TypedDict):
    address: str  # <machine>/<stream>/<node>/<port>: the broadcast's path
    url: str  # carries its token (?jwt=...): whoever holds the URL reads what the token allows
    fingerprint: str  # SHA-256 of the relay's certificate, hex (WebTransport serverCertificateHashes)
    level: str
    track: str  # the broadcast's track of bags, one msgpack frame per bag
    viewer: str  # the viewer page (loopback), showing this output, with the same token
    open: str | None  # with ``open``: the viewer page by a one-use code (30 s), for a browser's command line
    token: Token | None  # the public token minted (--public); None for the owner's own URL


class Token(TypedDict):
    id: str
    lvl: str  # private (an owner's URL, `url`) | public (`url --public`)
    root: str  # the path (or, with --prefix, the prefix of paths) it reads public outputs at
    issued: int  # unix seconds
    expires: int | None  # unix seconds; None: never
    revoked: bool
    note: str
    state: str  # valid | expired | revoked


class Tokens(TypedDict):
    tokens: list[Token]


class Rotated(TypedDict):
    key: str  # the new key's id
    revoked: int  # public tokens voided with the old key


def _not_serving(runtime: Runtime) -> None:
    relay = served_relay(runtime)
    problem = relay.problem
    if problem is not None:
        relay.retry()  # the port may be free by the next ask
        raise ControlError(f"the MoQ relay is not serving, so there is no URL to give: {problem}",
                           code="relay_not_serving", details={"setting": "TATOLAB_MOQ_PORT"})


@op("url")
async def url(runtime: Runtime, address: str, public: bool = False, expires: str = "7d",
              prefix: bool = False, open: bool = False) -> Url:
    """The MoQ URL of the exposed output at ``address`` (``<stream>/<node>/<port>``) carrying a
    token, and the SHA-256 fingerprint of the certificate it is served with. Without ``public``:
    the owner's URL (reads this output alone; the same until its id is revoked or `token rotate`;
    listed by `token_list`). With ``open``: also ``open``, the viewer page by a one-use code that
    lasts 30 s and carries no token, for a browser's command line (which other users can read).
    With ``public``: a
    new revocable token for others that reads this public output (``prefix``: every public output
    of this machine at or under ``address``, which may then name a stream), expiring after
    ``expires`` (1h, 7d, 30m, never). A URL is a capability: share it like a password."""
    relay = served_relay(runtime)
    try:
        lasts = parse_expiry(expires)
    except ValueError as exc:
        raise ControlError(str(exc), code="bad_value", details={"argument": "expires"}) from None
    if prefix:
        if not public:
            raise ControlError("a prefix token is one for others", code="prefix_needs_public",
                               fixes=[Fix("url", {"address": address, "public": True, "prefix": True}, "mint one")])
        root = f"{machine_name()}/{address.strip('/')}"
        if not address.strip("/") or ".." in address.split("/"):
            raise ControlError(f"{address!r} is not a prefix of addresses; give <stream> or <stream>/<node>",
                               code="bad_value", details={"argument": "address"})
        _not_serving(runtime)
        token, record = relay.keeper.mint(root, lasts, note="prefix")
        return {"address": root, "url": relay.url(root, "public", token), "fingerprint": relay.fingerprint(),
                "level": "public", "track": TRACK, "viewer": relay.viewer(root, token),
                "open": relay.viewer_once(root, token) if open else None,
                "token": {**record, "state": "valid"}}  # type: ignore[typeddict-item]
    short, level = exposed_output(runtime, address, "url", "so it has no URL")
    if public and level != "public":
        raise ControlError(f"{short} is private, so a public token would read nothing", code="not_public",
                           fixes=[Fix("expose", {"address": short, "level": "public"},
                                      "let your other machines read it first")])
    _not_serving(runtime)
    path = f"{machine_name()}/{short}"
    minted = None
    if public:
        token, record = relay.keeper.mint(path, lasts)
        minted = {**record, "state": "valid"}
    else:
        token = relay.keeper.owner_token(path)
    return {"address": path, "url": relay.url(path, level, token), "fingerprint": relay.fingerprint(),
            "level": level, "track": TRACK, "viewer": relay.viewer(path, token),
            "open": relay.viewer_once(path, token) if open else None, "token": minted}  # type: ignore[typeddict-item]


@op("token_list")
async def token_list(runtime: Runtime) -> Tokens:
    """The tokens this runtime minted: the owner's URLs (`url`, ``lvl`` private) and the public
    ones (`url --public`): id, what they read, when they expire, and whether they are valid,
    expired or revoked. Never the tokens themselves."""
    return {"tokens": served_relay(runtime).keeper.records()}  # type: ignore[typeddict-item]


@op("token_revoke")
async def token_revoke(runtime: Runtime, id: str) -> Token:
    """Revoke the token ``id`` (a public one, or an owner's URL: `url` then gives a new one): URLs
    carrying it read nothing from now on, and the sessions reading with it are cut at once."""
    relay = served_relay(runtime)
    try:
        record = relay.revoke(id)
    except KeyError:
        known = ", ".join(r["id"] for r in relay.keeper.records()) or "none"
        raise ControlError(f"no token {id!r}; the tokens are: {known}", code="unknown_token",
                           details={"argument": "id"}, fixes=[Fix("token_list", {}, "see them")]) from None
    return {**record, "state": "revoked"}  # type: ignore[typeddict-item]


@op("token_rotate")
async def token_rotate(runtime: Runtime) -> Rotated:
    """Make a new token key: every URL given so far (the owner's and every public one) stops
    working and its sessions are cut at once; `url` gives new ones."""
    relay = served_relay(runtime)
    valid = sum(1 for r in relay.keeper.records() if r["state"] == "valid")
    return {"key": relay.rotate(), "revoked": valid}
