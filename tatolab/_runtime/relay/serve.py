"""The relay's thread: applies each wanted set (``plan.py`` decides, this does), keeps the
outputs' broadcasts in the two origins, renews the certificate and shuts everything down.

Ownership: everything here lives on the relay thread's loop (``bridge.loop``): the origins, the
``outputs`` map, the parameter-set cache, the sync and renew tasks. The runtime's loop only reads
an output's counters (see ``feed.py``) and asks for a sync through ``Relay.sync``, which hands the
wanted set over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import subprocess
from typing import Any, Callable

from tatolab._runtime.relay import cert as certs
from tatolab._runtime.relay import config
from tatolab._runtime.relay.bridge import Bridge
from tatolab._runtime.relay.dial import Dialer
from tatolab._runtime.relay.feed import Output
from tatolab._runtime.relay.listen import Listeners
from tatolab._runtime.relay.plan import KINDS, Served, Target, plan
from tatolab._runtime.relay.encoding import parameter_sets
from tatolab._runtime.relay.scopes import Scopes
from tatolab._runtime.relay.tokens import Grant, Keeper
from tatolab._runtime.relay.wanted import Serve, carried

RENEW_CHECK_S = 3600.0
CARRIED_CHECK_S = 0.5  # an exposed output that wrote nothing yet is looked at again this often


class Serving:
    def __init__(self, bridge: Bridge, port: int, public_hosts: list[str], certificate: Callable[[], certs.Certificate],
                 dialer: Dialer, keeper: Keeper, page_outputs: Callable[[Grant], dict],
                 page_socket: socket.socket | None = None) -> None:
        self.bridge = bridge
        self.public_hosts = public_hosts
        self.certificate = certificate  # the current certificate (renewed when due)
        self.dialer = dialer
        self.upstream: str | None = None  # the joined relay's URL
        # what each listener serves: every exposed output on loopback; public ones on the public
        # addresses and to the joined relay (made with the first exposure: moq is imported then)
        self.origins: dict[str, Any] = {}
        self.outputs: dict[str, Output] = {}
        self._seeds: dict[tuple[int, int], bytes] = {}  # frame size -> H.264 parameter sets
        # (path, ring) -> what its bags are (wanted.carried): a frame size, or False for other bags
        self._carried: dict[tuple[str, str], tuple[int, int] | bool] = {}
        self._watching: asyncio.Task | None = None  # looks again at outputs that wrote nothing yet
        self.scopes = Scopes(self.outputs, lambda o: self._seeds.get(o.serve.size) if o.videos else None)
        self.listeners = Listeners(bridge, port, keeper, self.scopes,
                                   lambda: {p: o.serve.level for p, o in self.outputs.items()}, page_outputs,
                                   page_socket)
        self.wanted: dict[str, Serve] = {}  # the last wanted set applied
        self._want: dict[str, Serve] | None = None
        self._syncing: asyncio.Task | None = None
        self._renewing: asyncio.Task | None = None
        self.cert_in_use: certs.Certificate | None = None  # the one the listeners were started with

    def request_sync(self, wanted: dict[str, Serve]) -> None:
        """Serve ``wanted`` once the sync under way (if any) is done; only the latest one counts."""
        self._want = wanted
        if self._syncing is None or self._syncing.done():
            self._syncing = self.bridge.loop.create_task(self._sync_latest())

    def set_upstream(self, url: str | None) -> None:
        self.upstream = url
        self.dialer.set_upstream(url, self.origins.get("public"))

    async def _sync_latest(self) -> None:
        while self._want is not None:
            wanted, self._want = self._want, None
            try:
                await self._apply(wanted)
            except Exception as exc:  # never leaves the relay's thread without saying why
                self.bridge.say("error", f"MoQ relay: could not serve the exposed outputs: {exc}")

    def _classified(self, serve: Serve) -> Serve:
        """``serve`` as a video output (at its frames' size) when its bags name frames; told once per
        ring, by its first bag seen (an output that wrote nothing yet is looked at again later)."""
        key = (serve.path, serve.out.base)
        seen = self._carried.get(key)
        if seen is None:
            seen = carried(serve.out.base)
            if seen is None:
                return serve
            self._carried[key] = seen
        return dataclasses.replace(serve, video=True, size=seen) if isinstance(seen, tuple) else serve

    def _unclassified(self) -> list[Serve]:
        return [s for s in self.wanted.values() if (s.path, s.out.base) not in self._carried]

    async def _watch_unclassified(self) -> None:
        """Until every exposed output wrote something: once one did, serve it as what it carries."""
        while pending := self._unclassified():
            await asyncio.sleep(CARRIED_CHECK_S)
            if any(carried(s.out.base) is not None for s in pending):
                self.request_sync(self.wanted)

    async def _apply(self, wanted: dict[str, Serve]) -> None:
        wanted = {path: self._classified(serve) for path, serve in wanted.items()}
        bases = {(s.path, s.out.base) for s in wanted.values()}
        for gone in set(self._carried) - bases:
            del self._carried[gone]
        self.wanted = wanted
        if self._unclassified() and (self._watching is None or self._watching.done()):
            self._watching = self.bridge.loop.create_task(self._watch_unclassified())
        if wanted and not self.origins:
            try:
                import moq
            except ImportError:
                self.bridge.say("error", "MoQ relay: the moq-rs package is missing, so exposed outputs have no URL; "
                                "reinstall the runtime with its extras (tatolab[runtime]) and restart tatolabd")
                return
            self.origins.update({"loopback": moq.OriginProducer(), "public": moq.OriginProducer()})
            self.set_upstream(self.upstream)
        served = {path: Served(o.serve.out, frozenset(k for k in o.broadcasts if k in KINDS))
                  for path, o in self.outputs.items()}
        targets = {path: Target(s.level, s.out) for path, s in wanted.items()}
        steps = plan(frozenset(self.listeners.open), served, targets, bool(self.public_hosts))
        if steps.open:
            cert = self.cert_in_use = self.certificate()
            for kind in steps.open:
                await self.listeners.start(kind, config.LOOPBACK if kind == "loopback" else self.public_hosts[0], cert)
        for kind in steps.close:
            await self.listeners.stop(kind)
        wanted_kinds = {"loopback"} if wanted else set()
        if self.public_hosts and any(s.public for s in wanted.values()):
            wanted_kinds.add("public")
        for kind in set(self.listeners.problems) - wanted_kinds:
            del self.listeners.problems[kind]
        if wanted and self._renewing is None:
            self._renewing = self.bridge.loop.create_task(self._renew())
        for path, kinds in steps.drop.items():
            self._drop(path, kinds)
        for path, serve in wanted.items():
            output = self.outputs.get(path)
            if output is None:
                output = self.outputs[path] = Output(serve)
            found_frames = serve.video and not output.serve.video
            output.serve = serve
            if found_frames and output.made and path not in steps.refeed:
                # its first frame came after it was published: published anew, with its video track
                init = await self._parameter_sets(serve)
                if init is not None:
                    for key, (origin, _) in list(output.made.items()):
                        output.unpublish(key)
                        output.publish(key, origin, init)
            if path in steps.refeed:  # new rings, or private -> public: the feeder waits for the new tracks too
                output.stop_feeding()
            kinds = steps.add.get(path, ())
            init = await self._parameter_sets(serve) if serve.video and kinds else None
            for kind in kinds:
                output.publish(kind, self.origins[kind], init)
            output.start_feeding(self.bridge)
        self.scopes.refresh()

    async def _parameter_sets(self, serve: Serve) -> bytes | None:
        """The SPS/PPS the encoder will send for ``serve``'s frame size (nothing is encoded; made off
        this loop, once per size). They seed its video track, so the catalog lists the track before
        anyone subscribes, as players need; each keyframe carries its own (avc3), so frames of
        another size still decode (only the catalog's coded size is then off)."""
        if serve.size not in self._seeds:
            try:
                self._seeds[serve.size] = await self.bridge.loop.run_in_executor(None, parameter_sets, *serve.size)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                self.bridge.say("warning", f"MoQ relay: {serve.path} is served without its video track: {exc}")
                return None
        return self._seeds[serve.size]

    def _drop(self, path: str, kinds: tuple[str, ...]) -> None:
        """Stop serving ``path`` in ``kinds`` of origin, cutting the readers there at once."""
        output = self.outputs[path]
        for kind in kinds:
            output.unpublish(kind)
        self.listeners.cut(lambda r: r.path == path and r.kind in kinds)
        if not any(kind in output.broadcasts for kind in KINDS):
            for key in list(output.broadcasts):  # its broadcasts in the tokens' views too
                output.unpublish(key)
            output.stop_feeding()
            del self.outputs[path]

    async def _renew(self) -> None:
        """Renew the certificate before it expires; listeners restart with the new one (readers reconnect)."""
        while True:
            await asyncio.sleep(RENEW_CHECK_S)
            if self.cert_in_use is None or not self.cert_in_use.due():
                continue
            want = {o.serve.path: o.serve for o in self.outputs.values()}
            await self.listeners.stop_all()
            self.cert_in_use = None
            self.bridge.say("info", f"MoQ relay certificate renewed: sha-256 {self.certificate().fingerprint}")
            self.request_sync(want)  # listens again, with the new certificate

    async def close(self) -> None:
        self.dialer.close()
        if self._syncing is not None:
            self._syncing.cancel()
        if self._renewing is not None:
            self._renewing.cancel()
        if self._watching is not None:
            self._watching.cancel()
        for path in list(self.outputs):
            self._drop(path, ("loopback", "public"))
        await self.listeners.stop_all()
        self.listeners.release()
        loop = self.bridge.loop
        tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
