"""The viewer page's MoQ client ships in every install: moq-viewer.js is committed, a wheel built
from a clone's files on a machine without npm carries it, and the installed copy serves the page
and the script. The committed file is what scripts/build-viewer builds from its pinned sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VIEWER = REPO / "tatolab" / "_runtime" / "relay" / "viewer"
SERVE = """
import asyncio, socket, sys, tempfile, urllib.request
from pathlib import Path
from tatolab._runtime.relay import viewer
from tatolab._runtime.relay.tokens import Keeper

async def main():
    keeper = Keeper(Path(tempfile.mkdtemp()))
    token = keeper.owner_token("machine/stream/node/port")  # what `tatolab url` puts in the viewer's link
    with socket.socket() as probe:  # a free port: the page answers only for the port it serves on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    await viewer.serve("127.0.0.1", port, lambda grant: {"outputs": []}, keeper)
    def get(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.read()
    page, script = await asyncio.gather(*(asyncio.to_thread(get, p) for p in (f"/?jwt={token}", "/moq-viewer.js")))
    sys.stdout.buffer.write(b"%d %d\\n" % (len(page), len(script)) + page + script)
    print(viewer.__file__, file=sys.stderr)

asyncio.run(main())
"""


def test_the_viewer_client_and_its_lockfile_are_committed():
    tracked = subprocess.run(["git", "ls-files", "tatolab/_runtime/relay/viewer"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    assert {f"tatolab/_runtime/relay/viewer/{name}" for name in
            ("moq-viewer.js", "package.json", "package-lock.json", "entry.js", "index.html")} <= set(tracked)


@pytest.mark.slow
def test_a_pip_install_of_a_clone_without_npm_serves_the_viewer_page_and_its_client(tmp_path):
    # a fresh clone's files (what git tracks, as they are now), built into a wheel with no npm or node on PATH
    clone = tmp_path / "clone"
    for name in subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.splitlines():
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    bare_path = str(Path(sys.executable).parent)
    assert shutil.which("npm", path=bare_path) is None and shutil.which("node", path=bare_path) is None
    env = {**os.environ, "PATH": bare_path, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(clone)], env=env, check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("tatolab-*.whl"))
    with zipfile.ZipFile(wheel) as built:
        assert built.read("tatolab/_runtime/relay/viewer/moq-viewer.js") == (VIEWER / "moq-viewer.js").read_bytes()

    # installed with pip into an environment of its own, it serves the page and the script
    target = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], env=env, check=True, capture_output=True, timeout=300)
    # the viewer checks tokens with PyJWT (pure Python, no dependencies of its own): this environment's copy,
    # so that no package index is needed
    import jwt

    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shutil.copytree(Path(jwt.__file__).parent, Path(site) / "jwt")
    served = subprocess.run([str(python), "-c", SERVE], env=env, cwd=tmp_path, capture_output=True, timeout=60,
                            check=True)
    assert served.stderr.decode().strip().startswith(str(target))  # the installed copy, not this checkout
    sizes, _, body = served.stdout.partition(b"\n")
    page_size, script_size = map(int, sizes.split())
    assert body[:page_size] == (VIEWER / "index.html").read_bytes()
    assert body[page_size:] == (VIEWER / "moq-viewer.js").read_bytes() and script_size > 100_000


@pytest.mark.slow
def test_the_committed_client_is_what_its_pinned_sources_build():
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (.ci/run installs it): the check rebuilds moq-viewer.js with npm ci")
    done = subprocess.run([str(REPO / "scripts" / "build-viewer"), "--check"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "matches what package-lock.json and entry.js build" in done.stdout
