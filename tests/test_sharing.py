"""Who may read an output by URL, tried as an attacker would: another Unix user on this machine,
a machine on another network, a squatter on the relay's port. Every session needs a token; a
private output's token is its owner's alone; a public one is minted, expires and is revoked."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import jwt
import pytest

from harness import Runtime, make_project, read_jsonl, wait_for
from test_moq import ADDRESS, BLOB, SOURCE, netns, output_entry, source_project, standin, started, url_of  # noqa: F401  (fixtures)

HERE = Path(__file__).resolve().parent
PROBE = HERE / "moq_probe.py"
PROBE_MODULES = ("moq", "moq.errors", "asyncio", "json", "urllib.parse", "encodings.idna")


def probe(fingerprint: str, *pairs: str, prefix: list[str] | None = None) -> list[dict]:
    """tests/moq_probe.py's outcomes, one per (mode, url)."""
    done = subprocess.run([*(prefix or []), sys.executable, str(PROBE), fingerprint, *pairs],
                          capture_output=True, text=True, timeout=120)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def other_probe(other_user, fingerprint: str, *pairs: str) -> list[dict]:
    # its source, not its path: the other user may not reach this checkout
    source = PROBE.read_text().replace("from __future__ import annotations\n", "")
    process = other_user.python(f"sys.argv = {[str(PROBE), fingerprint, *pairs]!r}\n" + source, preload=PROBE_MODULES)
    out, err = process.communicate(timeout=120)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")] or [{"stderr": err}]


def http_get(url: str, host: str | None = None, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if host:
        request.add_header("Host", host)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def log_text(runtime: Runtime) -> str:
    return (runtime.root / "state" / "tatolab" / "runtime.jsonl").read_text()


@pytest.mark.slow
def test_another_local_user_reads_lists_and_publishes_nothing_while_the_owners_url_reads(
        other_user, project_venv, tmp_path):
    runtime = started(tmp_path / "rt")
    project = make_project(tmp_path / "source", project_venv, {
        "stream.py": SOURCE.replace("LEVEL", "Exposure.PRIVATE").replace("SIZE", "100")
        + '    other = stream_builder.add(Blob, name="other")\n'
          '    stream_builder.expose(other.output("blobs"), Exposure.PRIVATE)\n',
        "nodes/__init__.py": "", "nodes/blob.py": BLOB})
    runtime.cli("run", "-d", cwd=project, check=True)
    url, fingerprint = url_of(runtime)
    bare, _, token = url.partition("?jwt=")
    port = runtime.moq_port()
    root = f"https://127.0.0.1:{port}/"
    path = bare.split(f":{port}/", 1)[1]

    # the owner, by `tatolab url`'s URL; what it announces is that output alone
    read, listed = probe(fingerprint, "read", url, "list", f"{root}?jwt={token}")
    assert read["outcome"] == "read" and listed["paths"] == [path], listed

    # another user with the URL stripped of its token, and the fingerprint: refused, each way
    tried = other_probe(other_user, fingerprint, "read", bare, "list", root, "list", bare, "publish", bare,
                        "publish", root + "planted/by/them")
    print("another user, bare URL:", json.dumps(tried))  # shown with -s: the closing note's attacks
    assert [t.get("outcome") for t in tried] == ["refused"] * 5, tried
    # ... and the viewer page gives it no output's name
    page = f"http://127.0.0.1:{port}"
    viewed = other_user.python(
        "import urllib.request, urllib.error, json\n"
        f"for target in ({page + '/'!r}, {page + '/outputs.json'!r}):\n"
        "    try:\n"
        "        answer = urllib.request.urlopen(target, timeout=10); print(json.dumps([answer.status, answer.read().decode()]))\n"
        "    except urllib.error.HTTPError as e:\n"
        "        print(json.dumps([e.code, e.read().decode()]))\n",
        preload=("urllib.request", "urllib.error", "json", "http.client", "email.parser", "encodings.idna"))
    out, err = viewed.communicate(timeout=60)
    answers = [json.loads(line) for line in out.splitlines()]
    print("another user, viewer:", json.dumps([[status, body[:90]] for status, body in answers]))
    assert [a[0] for a in answers] == [401, 401], (answers, err)
    assert "This link is incomplete" in answers[0][1]
    assert all(path not in body and "blob" not in body for _, body in answers)
    # the page answers only to its own names (DNS rebinding), even with the token
    assert http_get(page + "/outputs.json", host=f"rebind.example:{port}", token=token)[0] == 421
    status, listing = http_get(page + "/outputs.json", token=token)
    assert status == 200 and [o["path"] for o in json.loads(listing)["outputs"]] == [path]

    # tokens that are not this output's owner's: refused with a reason in the log, never the token
    other_stream = jwt.encode({"root": path.rsplit("/", 2)[0] + "/x/y", "get": [""], "lvl": "private"},
                              "k" * 32, algorithm="HS256", headers={"kid": jwt.get_unverified_header(token)["kid"]})
    unsigned = jwt.encode({"root": path, "get": [""], "lvl": "private"}, None, algorithm="none")
    unknown = jwt.encode({"root": path, "get": [""], "lvl": "private"}, "k" * 32, algorithm="HS256",
                         headers={"kid": "nobody"})
    # a path that climbs out of the token's output (the client resolves '..' and '%2e%2e' before it
    # sends the path; the relay refuses any that still has one: tests/test_tokens.py)
    climbing = f"{bare}/%2e%2e/%2e%2e/other/blobs?jwt={token}"
    reading = subprocess.Popen([sys.executable, str(PROBE), fingerprint, "read", url],
                               stdout=subprocess.PIPE, text=True)  # an owner's reader all along
    bad = probe(fingerprint, "read", f"{bare}?jwt={other_stream}", "read", f"{bare}?jwt={unsigned}",
                "read", f"{bare}?jwt={unknown}", "read", f"huge:{bare}", "read", climbing,
                "read", f"{bare}?jwt=garbage")
    print("bad tokens:", json.dumps(bad))
    outcomes = [b["outcome"] for b in bad]
    assert outcomes[:3] == ["refused"] * 3 and outcomes[4:] == ["refused"] * 2, bad
    assert outcomes[3] != "read" and outcomes[3] != "nothing", bad  # 1 MB: never read, never a silent wait
    assert json.loads(reading.communicate(timeout=60)[0])["outcome"] == "read"  # the relay served on
    log = log_text(runtime)
    assert f"refused a session for {path}" in log and "not a JWT" in log and "'none' is not accepted" in log
    assert "no token" in log and "the token is for another output" in log
    assert token not in log and unsigned not in log

    # and when nothing outside can reach a public output, `expose --public` says so in one line
    exposed = runtime.cli("expose", ADDRESS, "--public", check=True).stdout
    assert "nothing outside this machine can reach it yet" in exposed and "tatolab relay join" in exposed
    # a public token for the whole stream announces its public output, never the private one
    shared = runtime.cli("url", "source", "--public", "--prefix", "--expires", "1h", check=True).stdout.split()[0]
    public_token = shared.partition("?jwt=")[2]
    listed, on_private = probe(fingerprint, "list", shared,
                               "read", f"{bare.replace('/blob/', '/other/')}?jwt={public_token}")
    assert listed["paths"] == [path], listed
    assert on_private["outcome"] == "refused"  # a public token used on a private output
    assert "the token is for public outputs and this one is private" in log_text(runtime)
    runtime.stop()


@pytest.mark.slow
def test_a_public_output_reads_only_with_a_minted_token_until_it_expires_or_is_revoked(
        project_venv, tmp_path, netns):  # noqa: F811
    runtime = started(tmp_path / "rt", TATOLAB_MOQ_PUBLIC=netns["here"])
    runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv, "Exposure.PUBLIC"), check=True)
    owners, fingerprint = url_of(runtime)
    bare = owners.partition("?")[0]
    inside = ["ip", "netns", "exec", netns["name"]]
    assert probe(fingerprint, "read", bare, "list", bare.rsplit("/", 4)[0] + "/", prefix=inside) == [
        {"mode": "read", "url": bare, "outcome": "refused"},
        {"mode": "list", "url": bare.rsplit("/", 4)[0] + "/", "outcome": "refused"}]

    minted = runtime.cli("url", ADDRESS, "--public", "--expires", "1h", check=True).stdout.splitlines()
    shared = minted[0]
    assert shared.startswith(f"https://{netns['here']}:") and shared != owners and "?jwt=" in shared
    token_id = minted[-1].split()[1].rstrip(":")
    assert "share it like a password" in minted[-1] and f"tatolab token revoke {token_id}" in minted[-1]
    assert probe(fingerprint, "read", shared, prefix=inside)[0]["outcome"] == "read"
    listed = runtime.cli("token", "list", check=True).stdout
    assert token_id in listed and "valid" in listed and shared.partition("jwt=")[2] not in listed

    # a token of 20 s reads (20 s: a probe started on a machine at 10x load reads within it); its expiry
    # is checked below, after the revoke's checks have taken some of its time
    brief = runtime.cli("url", ADDRESS, "--public", "--expires", "20s", check=True).stdout.splitlines()[0]
    assert probe(fingerprint, "read", brief, prefix=inside)[0]["outcome"] == "read"

    # revoked: the session reading with it is cut at once (within a second of the revoke, by the relay's
    # own clock: the test's would count the CLI's start too), and it reads nothing after
    reader = subprocess.Popen([*inside, sys.executable, str(HERE / "moq_reader.py"), shared, fingerprint,
                               "1000000", "--timeout", "30"], stdout=subprocess.PIPE, text=True)
    wait_for(lambda: output_entry(runtime)["network"]["readers"] >= 1, timeout=30, what="the reader reading")
    assert '"bag"' in reader.stdout.readline() + reader.stdout.readline() + reader.stdout.readline()
    runtime.cli("token", "revoke", token_id, check=True)
    log = runtime.root / "state" / "tatolab" / "runtime.jsonl"
    cut = wait_for(lambda: [r for r in read_jsonl(log) if "after their token was revoked" in r["message"]],
                   timeout=30, what="the relay to say it cut the session")
    assert cut[0]["fields"]["sessions"] >= 1 and cut[0]["fields"]["after_ms"] < 1000, cut  # (the probe's may linger)
    reader.communicate(timeout=30)  # (its line a bag fills the pipe: read what it said until it ends)
    assert probe(fingerprint, "read", shared, prefix=inside)[0]["outcome"] == "refused"
    assert "revoked" in runtime.cli("token", "list", check=True).stdout

    # expired: the brief token, which read before, reads nothing once its time is over
    wait_for(lambda: "expired" in runtime.cli("token", "list", check=True).stdout, timeout=60, what="it to expire")
    assert probe(fingerprint, "read", brief, prefix=inside)[0]["outcome"] == "refused"

    # rotating the key voids every URL at once, the owner's too
    runtime.cli("token", "rotate", check=True)
    assert [p["outcome"] for p in probe(fingerprint, "read", owners, "read", shared)] == ["refused", "refused"]
    assert url_of(runtime)[0] != owners
    runtime.stop()


@pytest.mark.slow
def test_a_squatted_port_and_a_taken_default_port_give_url_a_refusal_naming_the_cause(
        other_user, project_venv, tmp_path):
    # another user holds the relay's TCP port (the viewer page): we never hand out its page as ours
    squat = other_user.python(
        "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True)\nsys.stdin.read()\n", preload=("socket",), stdin=subprocess.PIPE)
    try:
        port = squat.stdout.readline().strip()
        runtime = started(tmp_path / "rt", TATOLAB_MOQ_PORT=port)
        runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv), check=True)
        wait_for(lambda: "not serving" in runtime.cli("streams", check=True).stdout, what="streams to say it")
        refused = runtime.cli("url", ADDRESS)
        assert refused.returncode != 0 and not refused.stdout
        assert f"tcp 127.0.0.1:{port} is held by another program or user" in refused.stderr, refused.stderr
        assert "TATOLAB_MOQ_PORT" in refused.stderr
        runtime.stop()
    finally:
        squat.kill()
        squat.communicate()

    # another runtime already serves on the port: `url` names that, not the other's URL
    first = started(tmp_path / "first")
    second = Runtime(tmp_path / "second")
    second.env["TATOLAB_MOQ_PORT"] = str(first.moq_port())
    second.start()
    project = source_project(tmp_path / "source2", project_venv)
    first.cli("run", "-d", cwd=project, check=True)
    second.cli("run", "-d", cwd=project, check=True)
    assert url_of(first)[0].startswith("https://127.0.0.1:")
    refused = second.cli("url", ADDRESS)
    assert refused.returncode != 0 and not refused.stdout and "is held by another program or user" in refused.stderr
    second.stop()
    first.stop()


@pytest.mark.slow
def test_relay_join_sends_its_token_and_a_refusal_is_reported_not_retried_forever(
        runtime, project_venv, tmp_path, standin):  # noqa: F811
    standin.start(token="let-me-in")
    runtime.cli("run", "-d", cwd=source_project(tmp_path / "source", project_venv, "Exposure.PUBLIC"), check=True)
    pinned = f"{standin.url()}#sha256={standin.cert.fingerprint}"
    runtime.cli("relay", "join", pinned, check=True)
    wait_for(lambda: "refused by" in runtime.cli("relay", check=True).stdout, timeout=30,
             what="the refusal to show")
    status = runtime.cli("relay", check=True).stdout
    assert "(unauthorized)" in status and "join again with a valid one" in status and "dialling again" not in status
    joined = runtime.cli("relay", "join", pinned, "--token", "let-me-in", check=True).stdout
    assert "let-me-in" not in joined and "jwt=..." in joined  # the token is never printed back
    wait_for(lambda: "(connected)" in runtime.cli("relay", check=True).stdout, timeout=30, what="joined with it")
    assert "let-me-in" not in log_text(runtime)
