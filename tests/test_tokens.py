"""The tokens a URL carries (moq-dev's JWT format) and the viewer page's checks, without a network."""

from __future__ import annotations

import base64
import json
import stat
import time

import jwt
import pytest

from tatolab._runtime.relay import viewer
from tatolab._runtime.relay.tokens import Keeper, Refused, normalize, parse_expiry, redact, token_of, with_token

PATH = "box/cam/camera/video"
OTHER = "box/cam/effect/video"


@pytest.fixture
def keeper(tmp_path):
    return Keeper(tmp_path)


def refused(keeper: Keeper, token: str | None, path: str = PATH) -> str:
    with pytest.raises(Refused) as caught:
        keeper.check(token, path)
    assert token is None or len(token) < 50 or token not in caught.value.reason  # never the token itself
    return caught.value.reason


def test_the_key_is_a_moq_token_jwk_the_users_alone_and_kept_across_restarts(tmp_path, keeper):
    key_file = tmp_path / "moq-token-key.jwk"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    jwk = json.loads(key_file.read_text())
    assert jwk["kty"] == "oct" and jwk["alg"] == "HS256" and jwk["kid"] == keeper.kid
    token = keeper.owner_token(PATH)
    assert Keeper(tmp_path).check(token, PATH).scope == PATH  # a restart keeps every URL good
    # what a moq-dev relay given this JWK checks: the signature, then root + get covering the path
    secret = base64.urlsafe_b64decode(jwk["k"] + "=" * (-len(jwk["k"]) % 4))
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert claims["root"] == PATH and claims["get"] == [""] and "put" not in claims
    assert jwt.get_unverified_header(token)["kid"] == jwk["kid"]


def test_the_owners_token_reads_its_output_alone_and_is_the_same_every_time(keeper):
    token = keeper.owner_token(PATH)
    assert token == keeper.owner_token(PATH)
    grant = keeper.check(token, "/" + PATH)
    assert grant.covers(PATH, "private") and grant.covers(PATH, "public")
    assert not grant.covers(OTHER, "private")
    assert "another output" in refused(keeper, token, OTHER)
    assert keeper.check(token, "").scope == PATH  # the server's root narrows nothing (moq-token's rule)


def test_a_public_token_reads_public_outputs_only_and_a_prefix_token_reads_below_it(keeper):
    token, record = keeper.mint(PATH, 3600)
    grant = keeper.check(token, PATH)
    assert grant.covers(PATH, "public") and not grant.covers(PATH, "private")
    assert grant.id == record["id"] and grant.expires == record["expires"]
    prefix, _ = keeper.mint("box/cam", None)
    grant = keeper.check(prefix, "")
    assert grant.covers(PATH, "public") and grant.covers(OTHER, "public")
    assert not grant.covers("box/cammy/n/p", "public")  # by whole segments
    assert grant.expires is None


def test_expired_revoked_rotated_and_strange_tokens_are_refused_with_a_reason(keeper):
    assert "no token" in refused(keeper, None)
    assert "not a JWT" in refused(keeper, "nonsense")
    assert "too long" in refused(keeper, "a" * 1_000_000)
    # alg none, and an unknown key id
    unsigned = jwt.encode({"root": PATH, "get": [""], "lvl": "private"}, None, algorithm="none",
                          headers={"kid": keeper.kid})
    assert "algorithm 'none'" in refused(keeper, unsigned)
    stranger = jwt.encode({"root": PATH, "get": [""], "lvl": "private"}, "k" * 32, algorithm="HS256",
                          headers={"kid": "someone-else"})
    assert "key this runtime" in refused(keeper, stranger)
    forged = jwt.encode({"root": PATH, "get": [""], "lvl": "private"}, "k" * 32, algorithm="HS256",
                        headers={"kid": keeper.kid})
    assert "not valid" in refused(keeper, forged)
    # expired
    old = jwt.encode({"root": PATH, "get": [""], "lvl": "public", "jti": "x", "exp": int(time.time()) - 5},
                     keeper._secret, algorithm="HS256", headers={"kid": keeper.kid})
    assert "expired" in refused(keeper, old)
    # revoked
    token, record = keeper.mint(PATH, None)
    keeper.revoke(record["id"])
    assert "revoked" in refused(keeper, token)
    assert [r["state"] for r in keeper.records()] == ["revoked"]
    # rotated: the owner's URL and every public one stop working at once
    owner = keeper.owner_token(PATH)
    fresh, _ = keeper.mint(PATH, None)
    keeper.rotate()
    assert "key this runtime" in refused(keeper, owner)
    assert "key this runtime" in refused(keeper, fresh)
    assert keeper.check(keeper.owner_token(PATH), PATH).scope == PATH


def test_paths_that_climb_are_refused_also_percent_encoded(keeper):
    token = keeper.owner_token(PATH)
    for path in ("box/cam/../cam/camera/video", "box/cam/%2e%2e/x", "box/cam/%2E%2E/x", "box/./cam", "a\x00b"):
        with pytest.raises(Refused, match="'..'"):
            keeper.check(token, path)
    assert normalize("//box//cam/") == "box/cam"


def test_expiry_words():
    assert parse_expiry("1h") == 3600 and parse_expiry("7d") == 7 * 86400 and parse_expiry("never") is None
    for bad in ("soon", "0h", "-1d", ""):
        with pytest.raises(ValueError, match="^expires '"):
            parse_expiry(bad)


def test_urls_carry_the_token_in_the_query_and_logs_never_see_it():
    url = with_token("https://127.0.0.1:4443/box/cam/camera/video", "abc.def.ghi")
    assert url == "https://127.0.0.1:4443/box/cam/camera/video?jwt=abc.def.ghi"
    assert token_of(url.partition("?")[2]) == "abc.def.ghi"
    assert redact(url) == "https://127.0.0.1:4443/box/cam/camera/video?jwt=..."


def _get(keeper, target, headers, listing=lambda grant: {"outputs": [grant.scope]}):
    return viewer.page(target, {"host": "127.0.0.1:4443", **headers}, 4443, listing, keeper)


def test_the_viewer_page_and_its_list_need_the_token_and_a_host_it_serves(keeper):
    token = keeper.owner_token(PATH)
    status, _, body = _get(keeper, "/", {})
    assert status == 401 and b"This link is incomplete" in body and PATH.encode() not in body
    status, _, body = _get(keeper, "/outputs.json", {})
    assert status == 401 and PATH.encode() not in body and b"no token" in body
    status, _, body = _get(keeper, "/outputs.json", {"authorization": f"Bearer {token}"})
    assert status == 200 and json.loads(body) == {"outputs": [PATH]}
    assert _get(keeper, f"/?jwt={token}", {})[0] == 200
    # DNS rebinding: a page of elsewhere that resolves its own name to 127.0.0.1 gets nothing
    for host in ("evil.example:4443", "127.0.0.1:80", ""):
        status, _, body = viewer.page("/outputs.json", {"host": host, "authorization": f"Bearer {token}"}, 4443,
                                      lambda grant: {"outputs": [PATH]}, keeper)
        assert status == 421 and PATH.encode() not in body
    assert viewer.host_ok("localhost:4443", 4443) and viewer.host_ok("[::1]:4443", 4443)


def test_a_revoked_or_expired_link_says_so_and_two_host_headers_are_refused(keeper):
    revoked, record = keeper.mint(PATH, None)
    keeper.revoke(record["id"])
    status, _, body = _get(keeper, f"/?jwt={revoked}", {})
    assert status == 401 and b"<h1>This link was revoked</h1>" in body and b"incomplete" not in body
    status, _, body = _get(keeper, "/outputs.json", {"authorization": f"Bearer {revoked}"})
    assert json.loads(body)["heading"] == "This link was revoked"
    assert viewer.heading("the token has expired; ask its owner for a new URL") == "This link has expired"
    assert b"<h1>This link is incomplete</h1>" in _get(keeper, "/", {})[2]
    # two Host headers: refused, never the last one quietly believed (nor the first)
    token = keeper.owner_token(PATH)
    head = (f"GET /outputs.json HTTP/1.1\r\nHost: evil.example:4443\r\nHost: 127.0.0.1:4443\r\n"
            f"Authorization: Bearer {token}\r\n\r\n").encode()
    status, _, body = viewer.answer(head, 4443, lambda grant: {"outputs": [PATH]}, keeper)
    assert status == 400 and body == b"two Host headers: refused\n"
    one = f"GET /outputs.json HTTP/1.1\r\nHost: 127.0.0.1:4443\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    assert viewer.answer(one, 4443, lambda grant: {"outputs": [PATH]}, keeper)[0] == 200


def test_tokens_ended_a_week_ago_leave_the_register_and_stay_refused(tmp_path, keeper, monkeypatch):
    from tatolab._runtime.relay import tokens

    expiring, soon = keeper.mint(PATH, 60)
    revoked, gone = keeper.mint(PATH, None)
    keeper.revoke(gone["id"])
    live, kept = keeper.mint(PATH, None)
    later = time.time() + 8 * 86400
    monkeypatch.setattr(tokens.time, "time", lambda: later)
    newest, new = keeper.mint(PATH, None)  # a mint prunes what ended more than a week ago
    assert set(keeper.register) == {kept["id"], new["id"]}
    assert set(Keeper(tmp_path).register) == {kept["id"], new["id"]}  # and so does the file
    for token in (expiring, revoked):
        assert refused(keeper, token) in ("the token is not one this runtime minted",
                                          "the token has expired; ask its owner for a new URL")
    assert keeper.check(live, PATH).scope == PATH and newest
