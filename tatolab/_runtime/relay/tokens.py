"""Who may read an output by URL: JWTs in moq-dev's format (moq-token: ``root``, ``get``, ``put``,
``exp``, ``iat``; HS256 with a ``kid``; sent as ``?jwt=``), signed with a key kept in the runtime's
user-only state folder, so a moq-dev relay configured with that key accepts the same tokens.

Two kinds, told apart by the ``lvl`` claim (other relays ignore it):
- ``private``: the owner's. ``tatolab url`` prints one per output: its root is the output's path,
  it never expires, and its id (``jti``) is in the register, so it is the same URL every time until
  ``tatolab token revoke ID`` voids that one (the next ``url`` gives a new one) or ``tatolab token
  rotate`` voids every one. A token of the owner's without an id (made before ids) is refused.
- ``public``: minted by ``tatolab url --public``: an id (``jti``), an expiry (or none), a root that
  is the output's path or (``--prefix``) a prefix of paths. Listed, revocable one by one. It reads
  public outputs only.

Opening the viewer (``tatolab url --open``) never puts a token on a browser's command line, where
another user reads it (``/proc/<pid>/cmdline``): the browser gets a loopback link with a one-use code
that lasts ``OPEN_CODE_S`` (``open_code``), which the viewer page exchanges for the token
(``redeem``) for a connection of this user's own only (viewer.py).

Ownership: a ``Keeper`` is shared by the runtime's loop (minting, revoking, rotating) and the
relay's thread (checking a connection's token); its key and register are replaced whole under
``lock`` and written to the state folder (0600) before the change is seen.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from tatolab._safe_fs import open_own_file, write_private_file

KEY_FILE = "moq-token-key.jwk"  # a JWK as moq-token writes it ({kid}.jwk for a moq-dev relay's key_dir)
REGISTER_FILE = "moq-tokens.json"  # the public tokens minted, and which are revoked
ALGORITHM = "HS256"
MAX_TOKEN = 4096  # bytes: a token is ~300; anything longer is refused unread
MAX_PATH = 1024
OPEN_CODE_S = 30.0  # a one-use code opening the viewer: long enough for a browser's cold start
KEEP_ENDED_S = 7 * 86400  # an expired or revoked token stays listed (and refused by name) this long, then goes


class Refused(Exception):
    """A connection or request the relay refuses: ``reason`` is told to the client and logged
    (it never holds the token); ``path`` is what it asked for."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


@dataclass(frozen=True)
class Grant:
    """What a checked token lets its holder read."""

    scope: str  # the path prefix it may subscribe to ("" for everything; never used by ours)
    level: str  # private (the owner's) | public
    id: str | None  # the token's id in the register (None: a token of another relay's making)
    kid: str
    expires: float | None  # unix seconds

    def covers(self, path: str, level: str) -> bool:
        """Whether it reads the output at ``path`` exposed at ``level``."""
        return under(path, self.scope) and (self.level == "private" or level == "public")


def normalize(path: str) -> str:
    """A broadcast path as moq-token compares them: no slashes at either end, none doubled.
    Refuses ``..`` and ``.`` segments, also percent-encoded, and control characters."""
    if len(path) > MAX_PATH:
        raise Refused("the path is too long", path[:80] + "...")
    decoded = urllib.parse.unquote(path)
    parts = [p for p in decoded.split("/") if p]
    if any(p in (".", "..") for p in parts) or any(ord(c) < 32 for c in decoded):
        raise Refused("the path has '.', '..' or control characters in it", path)
    return "/".join(parts)


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it, by whole segments (``a/b`` is not under ``a/bc``)."""
    return not prefix or path == prefix or path.startswith(prefix + "/")


def parse_expiry(text: str) -> float | None:
    """Seconds a token lives from ``1h``, ``30m``, ``7d``, ``90s``, ``2w``; None for ``never``."""
    text = text.strip().lower()
    if text == "never":
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    try:
        value = float(text[:-1])
        unit = units[text[-1]]
    except (KeyError, ValueError, IndexError):
        raise ValueError(f"expires {text!r} is not a duration; give e.g. 1h, 7d, 30m or never") from None
    if not value > 0:
        raise ValueError(f"expires {text!r} must be longer than nothing; give e.g. 1h, 7d or never")
    return value * unit


def _pruned(register: dict[str, dict[str, Any]], now: float) -> dict[str, dict[str, Any]]:
    """The register less the tokens that expired or were revoked more than KEEP_ENDED_S ago: it
    holds the live tokens and the recently ended, not every token ever minted. A pruned token is
    still refused (as not one this runtime minted): only a token in the register is ever accepted."""
    def ended(record: dict[str, Any]) -> float | None:
        if record.get("revoked"):
            return record.get("revoked_at") or record.get("issued") or 0
        return record.get("expires")

    return {i: r for i, r in register.items() if (end := ended(r)) is None or end > now - KEEP_ENDED_S}


class Keeper:
    """The runtime's token key and register (in ``state``)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.lock = threading.Lock()
        self.kid, self._secret = self._load_key() or self._new_key()
        self.register: dict[str, dict[str, Any]] = self._load_register()
        self._codes: dict[str, tuple[str, float]] = {}  # one-use code -> (token, monotonic deadline)

    # -- minting (the runtime's loop) --------------------------------------------------------

    def owner_token(self, path: str) -> str:
        """The owner's token for the output at ``path``: the same one until it is revoked (then a
        new one, with a new id) or the key is rotated."""
        with self.lock:
            record = next((r for r in self.register.values() if r.get("lvl") == "private" and r["root"] == path
                           and not r["revoked"]), None)
            if record is None:
                record = {"id": secrets.token_hex(4), "root": path, "issued": int(time.time()), "expires": None,
                          "revoked": False, "note": "owner", "lvl": "private"}
                register = {**self.register, record["id"]: record}
                self._save_register(register)
                self.register = register
            claims = {"root": path, "get": [""], "lvl": "private", "jti": record["id"], "iat": record["issued"]}
            return jwt.encode(claims, self._secret, ALGORITHM, headers={"kid": self.kid})

    def open_code(self, token: str) -> str:
        """A code that ``redeem`` exchanges for ``token`` once, within ``OPEN_CODE_S``."""
        code = secrets.token_urlsafe(18)
        with self.lock:
            now = time.monotonic()
            self._codes = {c: v for c, v in self._codes.items() if v[1] > now}
            self._codes[code] = (token, now + OPEN_CODE_S)
        return code

    def redeem(self, code: str) -> str | None:
        """The token ``code`` stands for, once; None when it was used, is too old, or never was."""
        with self.lock:
            found = self._codes.pop(code, None)
        if found is None or found[1] <= time.monotonic():
            return None
        return found[0]

    def mint(self, root: str, expires_s: float | None, note: str = "") -> tuple[str, dict[str, Any]]:
        """A new public token reading public outputs at or under ``root``; its record."""
        now = int(time.time())
        record: dict[str, Any] = {"id": secrets.token_hex(4), "root": root, "issued": now,
                  "expires": now + int(expires_s) if expires_s is not None else None, "revoked": False,
                  "note": note, "lvl": "public"}
        claims: dict[str, Any] = {"root": root, "get": [""], "lvl": "public", "jti": record["id"], "iat": now}
        if record["expires"] is not None:
            claims["exp"] = record["expires"]
        with self.lock:
            token = jwt.encode(claims, self._secret, ALGORITHM, headers={"kid": self.kid})
            register: dict[str, dict[str, Any]] = {**_pruned(self.register, now), record["id"]: record}
            self._save_register(register)
            self.register = register
        return token, record

    def revoke(self, token_id: str) -> dict[str, Any]:
        with self.lock:
            if token_id not in self.register:
                raise KeyError(token_id)
            now = int(time.time())
            record = {**self.register[token_id], "revoked": True, "revoked_at": now}
            register = {**_pruned(self.register, now), token_id: record}
            self._save_register(register)
            self.register = register
        return record

    def rotate(self) -> str:
        """A new key: every token signed with the old one (owner's and public) is void; the
        register's public tokens are all marked revoked. Returns the new key's id."""
        with self.lock:
            kid, secret = self._new_key()
            now = int(time.time())
            register = {i: {**r, "revoked": True, "revoked_at": r.get("revoked_at") or now}
                        for i, r in _pruned(self.register, now).items()}
            self._save_register(register)
            self.kid, self._secret, self.register = kid, secret, register
        return kid

    def records(self) -> list[dict[str, Any]]:
        now = time.time()
        with self.lock:
            found = list(self.register.values())
        return [{**r, "lvl": r.get("lvl", "public"), "state": "revoked" if r["revoked"] else
                 "expired" if r["expires"] is not None and r["expires"] <= now else "valid"}
                for r in sorted(found, key=lambda r: r["issued"])]

    # -- checking (the relay's thread, the viewer page) ----------------------------------------

    def check(self, token: str | None, path: str) -> Grant:
        """The grant ``token`` gives a connection to ``path``, or Refused saying why."""
        path = normalize(path)
        if not token:
            raise Refused("the URL has no token (?jwt=...); ask the output's owner for its URL", path)
        if len(token) > MAX_TOKEN:
            raise Refused(f"the token is too long ({len(token)} bytes)", path)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Refused("the token is not a JWT", path) from None
        if header.get("alg") != ALGORITHM:
            raise Refused(f"the token's algorithm {str(header.get('alg'))[:20]!r} is not accepted (only {ALGORITHM})",
                          path)
        with self.lock:
            kid, secret, register = self.kid, self._secret, self.register
        if header.get("kid") != kid:
            raise Refused("the token was signed with a key this runtime no longer holds (rotated) or never did",
                          path)
        try:
            claims = jwt.decode(token, secret, algorithms=[ALGORITHM], options={"verify_aud": False})
        except jwt.ExpiredSignatureError:
            raise Refused("the token has expired; ask its owner for a new URL", path) from None
        except jwt.InvalidTokenError as exc:
            raise Refused(f"the token is not valid ({type(exc).__name__})", path) from None
        level, root, gets = claims.get("lvl"), claims.get("root", ""), claims.get("get", [])
        gets = [gets] if isinstance(gets, str) else gets
        if level not in ("private", "public") or not isinstance(root, str) or not isinstance(gets, list) \
                or len(gets) != 1 or not isinstance(gets[0], str):
            raise Refused("the token's claims are not ones this runtime mints", path)
        token_id = claims.get("jti")
        record = register.get(token_id) if isinstance(token_id, str) else None
        if record is None and level == "private" and token_id is None:
            raise Refused("the token is an owner's URL from before owner URLs had ids (so it could not be "
                          "revoked alone); asking for the output's URL again (tatolab url) gives its new one", path)
        if record is None or record.get("lvl", "public") != level:
            raise Refused("the token is not one this runtime minted", path)
        if record["revoked"]:
            raise Refused("the token was revoked; ask its owner for a new URL", path)
        scope = "/".join(p for p in (normalize(root), normalize(gets[0])) if p)
        if under(path, scope):
            scope = path  # the connection narrows the grant (moq-token's rule)
        elif not under(scope, path):
            raise Refused("the token is for another output", path)
        expires = claims.get("exp")
        return Grant(scope, level, token_id, kid,
                     float(expires) if isinstance(expires, (int, float)) else None)

    # -- files ----------------------------------------------------------------------------------

    def _load_key(self) -> tuple[str, bytes] | None:
        try:
            fd = open_own_file(self.state / KEY_FILE, os.O_RDONLY, "the relay's token key")
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            try:
                jwk = json.loads(f.read())
                secret = base64.urlsafe_b64decode(jwk["k"] + "=" * (-len(jwk["k"]) % 4))
                if jwk.get("alg") != ALGORITHM or len(secret) < 32 or not isinstance(jwk.get("kid"), str):
                    return None
                return jwk["kid"], secret
            except (ValueError, KeyError, TypeError):
                return None

    def _new_key(self) -> tuple[str, bytes]:
        kid, secret = secrets.token_hex(8), secrets.token_bytes(32)
        jwk = {"kty": "oct", "alg": ALGORITHM, "kid": kid, "key_ops": ["sign", "verify"],
               "k": base64.urlsafe_b64encode(secret).rstrip(b"=").decode()}
        write_private_file(self.state / KEY_FILE, json.dumps(jwk).encode(), "the relay's token key")
        return kid, secret

    def _load_register(self) -> dict[str, dict[str, Any]]:
        try:
            fd = open_own_file(self.state / REGISTER_FILE, os.O_RDONLY, "the relay's token register")
        except OSError:
            return {}
        with os.fdopen(fd, "rb") as f:
            try:
                return {r["id"]: r for r in json.loads(f.read())["tokens"]}
            except (ValueError, KeyError, TypeError):
                return {}

    def _save_register(self, register: dict[str, dict[str, Any]]) -> None:
        write_private_file(self.state / REGISTER_FILE, json.dumps({"tokens": list(register.values())}, indent=1).encode(),
               "the relay's token register")




def with_token(url: str, token: str) -> str:
    """``url`` with ``?jwt=<token>`` (its fragment kept after it)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.urlencode([*urllib.parse.parse_qsl(parts.query), ("jwt", token)])
    return urllib.parse.urlunsplit(parts._replace(query=query))


def token_of(query: str | None) -> str | None:
    """The ``jwt`` value in a URL's query (None when there is none)."""
    if not query:
        return None
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get("jwt")
    return values[0] if values else None


def redact(url: str) -> str:
    """``url`` fit for a log or a status line: its token's value left out."""
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url
    query = "&".join(f"{k}=..." if k == "jwt" else f"{k}={v}" for k, v in urllib.parse.parse_qsl(parts.query, True))
    return urllib.parse.urlunsplit(parts._replace(query=query))
