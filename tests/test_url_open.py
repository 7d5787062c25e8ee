"""No token on a command line: `tatolab url --open` hands the browser a one-use, short-lived code
that the viewer page exchanges for the token, for a browser of the runtime's own user only; and an
owner's URL has an id, so it is revoked alone (`tatolab token revoke ID`)."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import jwt
import pytest

from harness import Runtime, wait_for
from other_user import OtherUser
from tatolab._runtime.relay import tokens, viewer
from tatolab._runtime.relay.peers import peer_uid
from tatolab._runtime.relay.tokens import Keeper, Refused
from test_moq import ADDRESS, source_project

PATH = "box/cam/camera/video"


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_an_owner_url_has_an_id_is_listed_and_is_revoked_alone(tmp_path: Path):
    keeper = Keeper(tmp_path)
    mine, other = keeper.owner_token(PATH), keeper.owner_token("box/cam/camera/other")
    assert mine == keeper.owner_token(PATH)  # the same URL every time
    record = next(r for r in keeper.records() if r["root"] == PATH)
    assert record["lvl"] == "private" and record["state"] == "valid" and record["expires"] is None
    assert keeper.check(mine, PATH).id == record["id"]
    keeper.revoke(record["id"])
    with pytest.raises(Refused, match="revoked"):
        keeper.check(mine, PATH)
    assert keeper.check(other, "box/cam/camera/other").level == "private"  # the other output's URL still reads
    fresh = keeper.owner_token(PATH)
    assert fresh != mine and keeper.check(fresh, PATH).scope == PATH
    assert Keeper(tmp_path).check(fresh, PATH).id != record["id"]  # kept in the register across restarts
    # an owner's token without an id (as made before): it could never be revoked alone
    old = jwt.encode({"root": PATH, "get": [""], "lvl": "private"}, keeper._secret, algorithm="HS256",
                     headers={"kid": keeper.kid})
    with pytest.raises(Refused, match="from before owner URLs had ids"):
        keeper.check(old, PATH)


def test_a_code_opens_the_page_once_for_this_user_and_not_after_its_time(tmp_path: Path, monkeypatch):
    keeper = Keeper(tmp_path)
    token = keeper.owner_token(PATH)
    headers = {"host": "127.0.0.1:4443"}

    def page(target: str, uid: int | None) -> tuple[int, bytes]:
        status, _, body = viewer.page(target, headers, 4443, lambda grant: {}, keeper, lambda: uid)
        return status, body

    code = keeper.open_code(token)
    assert token not in code and len(code) >= 24
    status, body = page(f"/open?code={code}", os.getuid() + 1)  # another user's connection: refused, code kept
    assert status == 403 and b"opens only in a browser of the user who asked for it" in body
    status, body = page(f"/open?code={code}", None)  # a connection whose user is unknown: refused too
    assert status == 403
    status, body = page(f"/open?code={code}", os.getuid())
    assert status == 200 and f'<meta name="tatolab-token" content="{token}">'.encode() in body
    status, body = page(f"/open?code={code}", os.getuid())  # once only
    assert status == 401 and b"this one-use link was used already or is older than 30 s" in body
    monkeypatch.setattr(tokens, "OPEN_CODE_S", 0.0)
    late = keeper.open_code(token)
    assert page(f"/open?code={late}", os.getuid())[0] == 401
    assert page("/open?code=made-up", os.getuid())[0] == 401 and page("/open", os.getuid())[0] == 401


def test_another_users_connection_is_told_apart_from_ours(other_user: OtherUser):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        theirs = other_user.python(f"import socket, sys\nheld = socket.create_connection(('127.0.0.1', {port}))\n"
                                   "sys.stdin.read()\n", preload=("socket", "encodings.idna"), stdin=subprocess.PIPE)
        try:
            while not select.select([server], [], [], 0.1)[0]:  # their connection, or their process ending
                assert theirs.poll() is None, theirs.communicate()
            conn, _ = server.accept()
            with conn:
                assert peer_uid(conn.getpeername(), conn.getsockname()) == other_user.uid
        finally:
            theirs.kill()
            theirs.wait()
        with socket.create_connection(("127.0.0.1", port)), server.accept()[0] as conn:
            assert peer_uid(conn.getpeername(), conn.getsockname()) == os.getuid()


FAKE_BROWSER = """#!/bin/sh
# a browser: says where it is and what it was given, then stays open until the test is done looking
echo $$ > "{folder}/pid"
printf '%s' "$1" > "{folder}/url.tmp" && mv "{folder}/url.tmp" "{folder}/url"
while [ ! -e "{folder}/go" ]; do sleep 0.05; done
"""


@pytest.mark.slow
def test_url_open_puts_no_token_where_another_user_can_read_it(runtime: Runtime, project_venv: Path,
                                                               other_user: OtherUser, tmp_path: Path):
    runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv), check=True)
    wait_for(lambda: runtime.cli("url", ADDRESS).returncode == 0, what="the output served")
    token = runtime.cli("url", ADDRESS, check=True).stdout.splitlines()[0].partition("?jwt=")[2]
    assert token
    browser = tmp_path / "browser"
    browser.mkdir()
    script = tmp_path / "fake-browser"
    script.write_text(FAKE_BROWSER.format(folder=browser))
    script.chmod(0o755)
    opening = runtime.popen_cli("url", ADDRESS, "--open", env={**runtime.env, "BROWSER": str(script)})
    wait_for(lambda: (browser / "url").exists(), what="the browser started")
    pid = int((browser / "pid").read_text())
    url = (browser / "url").read_text()
    # what a second user sees of the browser's process (ps, /proc/<pid>/cmdline) and of the command's
    seen = other_user.run(["sh", "-c", f"cat /proc/{pid}/cmdline /proc/{opening.pid}/cmdline | tr '\\0' ' '; "
                                       "ps -eo args"])
    print(f"a second user's view during `url --open`: {seen.stdout.splitlines()[0]}")
    assert seen.returncode == 0 and "/open?code=" in seen.stdout
    assert token not in seen.stdout and "jwt" not in seen.stdout
    environ = other_user.run(["cat", f"/proc/{pid}/environ"])
    assert environ.returncode != 0  # (and it holds no token either: the browser got none)
    assert token.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    # the code, read off the command line, opens nothing for them...
    fetch = other_user.python(f"import urllib.request, urllib.error\ntry:\n    urllib.request.urlopen({url!r})\n"
                              "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n",
                              preload=("urllib.request", "urllib.error", "http.client", "encodings.idna"))
    out, err = fetch.communicate(timeout=30)
    assert out.startswith("403 ") and "opens only in a browser of the user who asked for it" in out, out + err
    # ...and once for the browser of the user who asked: the page holds the token, the code is spent
    status, body = _get(url)
    assert status == 200 and f'content="{token}"'.encode() in body
    status, body = _get(url)
    assert status == 401 and b"used already" in body
    (browser / "go").touch()
    _, err = opening.communicate(timeout=60)
    assert opening.returncode == 0, err

    # the owner's URL is listed and revoked alone: the page (and the relay) refuse it, `url` gives a new one
    listed = runtime.cli("token", "list", check=True).stdout
    (line,) = [line for line in listed.splitlines() if line.endswith(f"/{ADDRESS}  valid  never expires  (your URL)")
               or (ADDRESS in line and "(your URL)" in line)]
    token_id = line.split()[0]
    page = f"http://127.0.0.1:{runtime.env['TATOLAB_MOQ_PORT']}/?jwt={token}"
    assert _get(page)[0] == 200
    runtime.cli("token", "revoke", token_id, check=True)
    status, body = _get(page)
    assert status == 401 and b"revoked" in body
    fresh = runtime.cli("url", ADDRESS, check=True).stdout.splitlines()[0].partition("?jwt=")[2]
    assert fresh != token and _get(f"http://127.0.0.1:{runtime.env['TATOLAB_MOQ_PORT']}/?jwt={fresh}")[0] == 200


@pytest.mark.slow
def test_headless_chromium_opens_the_viewer_by_its_one_use_link_and_reads_bags(runtime: Runtime, project_venv: Path,
                                                                               tmp_path: Path):
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here (.ci/run installs Debian's)")
    runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv), check=True)
    wait_for(lambda: runtime.cli("url", ADDRESS).returncode == 0, what="the output served")
    script = tmp_path / "fake-browser"
    script.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {tmp_path / 'url'}\n")
    script.chmod(0o755)
    runtime.cli("url", ADDRESS, "--open", env={**runtime.env, "BROWSER": str(script)}, check=True)
    link = (tmp_path / "url").read_text()
    assert "/open?code=" in link and "jwt" not in link
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(link)
            page.wait_for_function("Number(document.getElementById('count').textContent) >= 5", timeout=30_000)
            assert "code=" not in page.url and page.url.endswith(f"/{ADDRESS}")  # the spent code left the address
            again = browser.new_page()
            again.goto(link)
            assert "This link was used already" in again.inner_text("h1") and "used already" in again.inner_text("#why")
        finally:
            browser.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
