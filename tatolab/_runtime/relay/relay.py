"""The runtime's MoQ relay (moq-rs, the moq-dev implementation): each exposed output is a broadcast
whose path is its address, with a track of bags, one frame per bag. A video output's broadcast also
carries its frames in the moq-dev media format (a catalog and an H.264 track), encoded only while
someone subscribes to that track, once for all of them.

Three kinds of thread, one module each:
- the runtime's loop calls this façade (``Relay``): it hands work to the relay's thread and
  answers what ``graph``, ``url`` and ``relay status`` ask;
- the relay's thread runs its own event loop: ``serve.py`` applies each wanted set as ``plan.py``
  decides, ``listen.py`` runs the accept loop, ``dial.py`` the outgoing connections;
- each output being read has a feeding thread (``feed.py``).
The Rust side runs on its own threads. Private outputs are served on loopback only; public ones
also on the configured public addresses. Nothing listens while nothing is exposed, and an output's
ring is read only while someone subscribes to its track.

Who may read: every session and the viewer page need a token (``tokens.py``); ``url`` prints
URLs that carry one, ``revoke``/``rotate`` void them and cut their sessions at once.

Ownership here: ``state``, ``machine``, ``port`` and ``public_hosts`` are set once; ``cert`` is
made or renewed by whichever thread asks first, under ``_cert_lock``; ``upstream`` (the joined
relay's URL) is written on the runtime's loop and handed to the relay's thread; ``keeper`` is
shared (its own lock).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Callable, cast

from tatolab._model.view import Network, VideoNetwork
from tatolab._runtime.relay import cert as certs
from tatolab._runtime.relay import config, upstream
from tatolab._runtime.relay.bridge import Bridge, Say
from tatolab._runtime.relay.dial import Dialer
from tatolab._runtime.relay.pulls import Pull, PullId
from tatolab._runtime.relay.serve import Serving
from tatolab._runtime.relay.tokens import Grant, Keeper, with_token
from tatolab._runtime.relay.wanted import Serve


class Relay:
    """Serves the exposed outputs ``sync`` is given; ``url``, ``fingerprint`` and ``network`` tell about them."""

    def __init__(self, state: Path, say: Say, machine: str) -> None:
        self.state = state
        self.machine = machine
        # the port (chosen now if TATOLAB_MOQ_PORT is 0: every URL of this run names it) and, then, its TCP side held
        self.port, page_socket = config.reserve(config.port())
        self.public_hosts = config.public_addresses()
        loop = asyncio.new_event_loop()
        self._bridge = Bridge(asyncio.get_running_loop(), loop, say)
        self._thread = threading.Thread(target=loop.run_forever, name="tatolab-moq-relay", daemon=True)
        self.cert: certs.Certificate | None = None
        self._cert_lock = threading.Lock()
        # told each URL link's state (None: reading; else why it waits), on the runtime's loop
        self.on_pull_state: Callable[[Pull, str | None], None] = lambda pull, waiting: None
        self._dialer = Dialer(self._bridge, lambda pull, waiting: self.on_pull_state(pull, waiting))
        self.keeper = Keeper(state)
        self._serving = Serving(self._bridge, self.port, self.public_hosts, self._certificate, self._dialer,
                                self.keeper, self._page_outputs, page_socket)
        self.upstream = self._serving.upstream = upstream.load(state)  # the relay on the internet this machine joined

    @property
    def upstream_state(self) -> str:
        return self._dialer.upstream_state

    def start(self) -> None:
        self._thread.start()

    def sync(self, wanted: dict[str, Serve], pulls: dict[PullId, Pull] | None = None) -> None:
        """Serve exactly ``wanted`` from now on (outputs no longer in it cut their readers at once),
        and read exactly ``pulls`` (other runtimes' outputs, by URL)."""
        loop = self._bridge.loop
        loop.call_soon_threadsafe(self._serving.request_sync, dict(wanted))
        if pulls is not None:
            loop.call_soon_threadsafe(self._dialer.sync_pulls, dict(pulls))

    async def close(self) -> None:
        if not self._thread.is_alive():
            return
        loop = self._bridge.loop
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._serving.close(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def url(self, path: str, level: str, token: str) -> str:
        """The URL of the broadcast at ``path`` carrying ``token``: on loopback for a private output,
        on the first public address for a public one (loopback when the machine has none)."""
        host = self.public_hosts[0] if level == "public" and self.public_hosts else config.LOOPBACK
        return with_token(config.url(host, self.port, path), token)

    @property
    def problem(self) -> str | None:
        """Why the relay is not serving (a port it cannot bind, or that someone else holds); None when it is."""
        problems = dict(self._serving.listeners.problems)
        return "; ".join(problems.values()) or None

    def retry(self) -> None:
        """Try again to listen where it could not (the port may be free now)."""
        self._bridge.loop.call_soon_threadsafe(lambda: self._serving.request_sync(self._serving.wanted))

    def reachable(self) -> bool:
        """Whether anything outside this machine can reach a public output: a public address
        (a tailnet's, or TATOLAB_MOQ_PUBLIC) or a joined relay on the internet."""
        return bool(self.public_hosts or self.upstream)

    def revoke(self, token_id: str) -> dict[str, Any]:
        """Void the public token ``token_id`` and cut its sessions now (KeyError: no such token)."""
        record = self.keeper.revoke(token_id)
        self._bridge.loop.call_soon_threadsafe(self._serving.listeners.cut_unauthorized, "revoked", time.monotonic_ns())
        return record

    def rotate(self) -> str:
        """A new token key: every URL given so far stops working, and its sessions are cut now."""
        kid = self.keeper.rotate()
        self._bridge.loop.call_soon_threadsafe(self._serving.listeners.cut_unauthorized, "voided by a new key",
                                               time.monotonic_ns())
        return kid

    def join(self, url: str | None) -> None:
        """Publish the public outputs into the relay at ``url`` from now on (None: leave it)."""
        self.upstream = url
        self._bridge.loop.call_soon_threadsafe(self._serving.set_upstream, url)

    def viewer(self, path: str, token: str) -> str:
        """The viewer page with ``token``, showing the output at ``path``."""
        return f"http://{config.bind(config.LOOPBACK, self.port)}/?jwt={token}#{path}"

    def viewer_once(self, path: str, token: str) -> str:
        """The viewer page showing ``path`` by a one-use code for ``token`` (viewer.py's ``/open``):
        for a browser's command line, which every user of the machine can read."""
        code = self.keeper.open_code(token)
        return f"http://{config.bind(config.LOOPBACK, self.port)}/open?code={code}#{path}"

    def _page_outputs(self, grant: Grant) -> dict[str, Any]:
        """What the viewer page lists to ``grant``'s holder (runs on the relay's thread)."""
        return {"machine": self.machine, "fingerprint": self.fingerprint(),
                "outputs": [{"path": path, "level": o.serve.level, "video": bool(o.serve.video),
                             "url": config.url(config.LOOPBACK, self.port, path)}
                            for path, o in sorted(self._serving.outputs.items())
                            if grant.covers(path, o.serve.level)]}

    def fingerprint(self) -> str:
        """The SHA-256 of the certificate the relay serves (made now if it has none yet)."""
        return self._certificate().fingerprint

    def _certificate(self) -> certs.Certificate:
        with self._cert_lock:  # both threads may ask first
            if self.cert is None or self.cert.due():
                self.cert, _ = certs.ensure(self.state, self._names())
            return self.cert

    def _names(self) -> list[str]:
        return ["localhost", config.LOOPBACK, "::1", self.machine, *self.public_hosts]

    def network(self, path: str) -> Network:
        """Network readers of the broadcast at ``path`` and what was sent to them."""
        readers, sent = self._serving.listeners.network(path)
        output = self._serving.outputs.get(path)
        network = Network(
            readers=readers,
            bytes_sent=sent,
            bags_sent=output.bags_sent if output else 0,
            # bags the relay never read because its ring's writer lapped it (it fell behind)
            dropped=output.dropped if output else 0,
            reading=output is not None and output.reader_index is not None,
        )
        if output is not None and output.videos:
            network["video"] = cast(VideoNetwork, {
                "encoding": output.encoding, "encodes": output.encodes, "frames_encoded": output.frames_encoded,
                "frames_skipped": output.frames_skipped, "encoder": output.encoder or None,
                # its encoder's own process, supervised as a built-in node is (encoding.py)
                **(output.encoder_process.state() if output.encoder_process is not None
                   else {"pid": None, "restarts": 0, "last_error": None})})
        return network

    def missed(self, pull: PullId) -> int:
        """Bags of the URL link ``pull`` its relay never handed over (ordered.py)."""
        return self._dialer.missed.get(pull, 0)

    def reader_index(self, path: str) -> int | None:
        output = self._serving.outputs.get(path)
        return output.reader_index if output else None
