"""The runtime's MoQ relay (moq-rs, the moq-dev implementation): each exposed output is a broadcast
whose path is its address, with a track of bags, one frame per bag. A video output's broadcast also
carries its frames in the moq-dev media format (a catalog and an H.264 track), encoded only while
someone subscribes to that track, once for all of them.

It runs on a thread of its own with its own event loop, so no network work runs on the runtime's
loop; the Rust side runs on its own threads. Private outputs are served on loopback only; public
ones also on the configured public addresses. Nothing listens while nothing is exposed, and an
output's ring is read only while someone subscribes to its track.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tatolab._control import paths
from tatolab._links.ring import RingError, RingReader, RingWriter
from tatolab._runtime.nodes import claim_reader, release_reader
from tatolab._runtime.relay import cert as certs
from tatolab._runtime.relay import config, upstream, viewer
from tatolab._runtime.relay.pulls import Pull, PullId
from tatolab._runtime.relay.video import Encoder
from tatolab._runtime.relay.wanted import TRACK, VIDEO_TRACK, Serve

RENEW_CHECK_S = 3600.0
WAIT_S = 0.25  # a feeding thread looks at its tracks' subscribers at least this often
NOT_SERVED_S = 3.0  # a URL link says why it waits once its broadcast is not there this long
BACKOFF_S = (0.5, 10.0)
KEEP_US = 10_000_000  # a URL link takes every bag up to 10 s late; its input's profile then decides  # a URL link dials again after 0.5 s, doubling up to 10 s
CUT = 403  # the code network readers are cut with when an output stops being theirs to read

Say = Callable[..., None]


@dataclass
class _Listener:
    kind: str  # "loopback" | "public"
    host: str
    server: Any  # moq.Server
    task: asyncio.Task | None = None
    page: asyncio.base_events.Server | None = None  # the viewer page (loopback only)


@dataclass
class _Reader:
    """One network session: the listener it came in on and the path it asked for."""

    kind: str
    path: str
    session: Any  # moq.Session
    bytes_sent: int = 0

    def sent(self) -> int:
        try:
            stats = self.session.stats()
        except Exception:  # a closed session has nothing more to say
            return self.bytes_sent
        self.bytes_sent = max(self.bytes_sent, stats.bytes_sent or 0)
        return self.bytes_sent


@dataclass
class _Output:
    serve: Serve
    broadcasts: dict[str, Any] = field(default_factory=dict)  # origin ("loopback"/"public") -> moq.BroadcastProducer
    tracks: dict[str, Any] = field(default_factory=dict)  # same keys -> moq.TrackProducer
    videos: dict[str, Any] = field(default_factory=dict)  # same keys -> moq.MediaProducer (video outputs)
    task: asyncio.Task | None = None
    stopping: asyncio.Task | None = None  # a feeder told to stop: the next one starts after it ended
    bags_sent: int = 0
    reader_index: int | None = None  # the ring's reader record it holds while someone subscribes
    encoding: bool = False  # its H.264 encoder is open (someone reads its video track)
    encodes: int = 0  # how many times an encoder was started for it
    frames_encoded: int = 0
    frames_skipped: int = 0  # frames the encoder was too slow for (video readers only)
    encoder: str = ""  # the FFmpeg encoder that opened

    def producers(self) -> list[Any]:
        """Every track of it that can have subscribers."""
        return [*self.tracks.values(), *self.videos.values()]


class Relay:
    """Serves the exposed outputs ``sync`` is given; ``url``, ``fingerprint`` and ``network`` tell about them."""

    def __init__(self, state: Path, say: Say, machine: str) -> None:
        self.state = state
        self.machine = machine
        self.port = config.port()
        self.public_hosts = config.public_addresses()
        self._say_main = say
        self._main = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tatolab-moq-relay", daemon=True)
        self._lock = threading.Lock()  # guards _readers and _closed_bytes (read by `graph` on the runtime's loop)
        self._readers: list[_Reader] = []
        self._closed_bytes: dict[str, int] = {}
        self._outputs: dict[str, _Output] = {}  # relay thread only
        self._seeds: dict[tuple[int, int], bytes] = {}  # frame size -> H.264 parameter sets (relay thread only)
        self._listeners: dict[str, _Listener] = {}  # relay thread only
        # what each listener serves: every exposed output on loopback; public ones on the public
        # addresses and to the joined relay (made with the first exposure: moq is imported then)
        self._origins: dict[str, Any] = {}
        self.upstream = upstream.load(state)  # the relay on the internet this machine joined, if any
        self.upstream_state = "not joined"
        self._upstream_task: asyncio.Task | None = None
        self._want: dict[str, Serve] | None = None
        self._syncing: asyncio.Task | None = None
        self._renewing: asyncio.Task | None = None
        self._pulls: dict[PullId, tuple[Pull, asyncio.Task]] = {}  # relay thread only
        # told each URL link's state (None: reading; else why it waits), on the runtime's loop
        self.on_pull_state: Callable[[Pull, str | None], None] = lambda pull, waiting: None
        self.cert: certs.Certificate | None = None
        self._cert_lock = threading.Lock()

    # -- the runtime's side (its event loop) -----------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def sync(self, wanted: dict[str, Serve], pulls: dict[PullId, Pull] | None = None) -> None:
        """Serve exactly ``wanted`` from now on (outputs no longer in it cut their readers at once),
        and read exactly ``pulls`` (other runtimes' outputs, by URL)."""
        self._loop.call_soon_threadsafe(self._request_sync, dict(wanted))
        if pulls is not None:
            self._loop.call_soon_threadsafe(self._sync_pulls, dict(pulls))

    async def close(self) -> None:
        if not self._thread.is_alive():
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close(), self._loop))
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def url(self, path: str, level: str) -> str:
        """The URL of the broadcast at ``path``: on loopback for a private output, on the first
        public address for a public one (loopback when the machine has none)."""
        host = self.public_hosts[0] if level == "public" and self.public_hosts else config.LOOPBACK
        return config.url(host, self.port, path)

    def join(self, url: str | None) -> None:
        """Publish the public outputs into the relay at ``url`` from now on (None: leave it)."""
        self.upstream = url
        self._loop.call_soon_threadsafe(self._set_upstream, url)

    def viewer(self, path: str) -> str:
        """The viewer page, showing the output at ``path``."""
        return f"http://{config.bind(config.LOOPBACK, self.port)}/#{path}"

    def _page_outputs(self) -> dict[str, Any]:
        """What the viewer page lists (runs on the relay's thread)."""
        return {"machine": self.machine, "fingerprint": self.fingerprint(),
                "outputs": [{"path": path, "level": o.serve.level, "video": bool(o.serve.video),
                             "url": config.url(config.LOOPBACK, self.port, path)}
                            for path, o in sorted(self._outputs.items())]}

    def fingerprint(self) -> str:
        """The SHA-256 of the certificate the relay serves (made now if it has none yet)."""
        return self._certificate().fingerprint

    def _certificate(self) -> certs.Certificate:
        with self._cert_lock:  # both threads may ask first
            if self.cert is None or self.cert.due():
                self.cert, _ = certs.ensure(self.state, self._names())
            return self.cert

    def network(self, path: str) -> dict[str, Any]:
        """Network readers of the broadcast at ``path`` and what was sent to them."""
        with self._lock:
            readers = [r for r in self._readers if r.path == path]
            closed = self._closed_bytes.get(path, 0)
        output = self._outputs.get(path)
        return {
            "readers": len(readers),
            "bytes_sent": closed + sum(r.sent() for r in readers),
            "bags_sent": output.bags_sent if output else 0,
            "reading": output is not None and output.reader_index is not None,
            **({"video": {"encoding": output.encoding, "encodes": output.encodes,
                          "frames_encoded": output.frames_encoded, "frames_skipped": output.frames_skipped,
                          "encoder": output.encoder or None}}
               if output is not None and output.videos else {}),
        }

    def reader_index(self, path: str) -> int | None:
        output = self._outputs.get(path)
        return output.reader_index if output else None

    # -- the relay's thread --------------------------------------------------------------------

    def _say(self, level: str, message: str, **fields: Any) -> None:
        self._main.call_soon_threadsafe(lambda: self._say_main(level, message, **fields))

    async def _on_main(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function`` on the runtime's loop (reader records are the runtime's to hand out)."""
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(function(*args))
            except BaseException as exc:
                done.set_exception(exc)

        self._main.call_soon_threadsafe(run)
        return await asyncio.wrap_future(done)

    def _names(self) -> list[str]:
        return ["localhost", config.LOOPBACK, "::1", self.machine, *self.public_hosts]

    def _request_sync(self, wanted: dict[str, Serve]) -> None:
        self._want = wanted
        if self._syncing is None or self._syncing.done():
            self._syncing = self._loop.create_task(self._sync_latest())

    async def _sync_latest(self) -> None:
        while self._want is not None:
            wanted, self._want = self._want, None
            try:
                await self._apply(wanted)
            except Exception as exc:  # never leaves the relay's thread without saying why
                self._say("error", f"MoQ relay: could not serve the exposed outputs: {exc}")

    async def _apply(self, wanted: dict[str, Serve]) -> None:
        if wanted and not self._origins:
            try:
                import moq
            except ImportError:
                self._say("error", "MoQ relay: the moq-rs package is missing, so exposed outputs have no URL; "
                          "reinstall the runtime with its extras (tatolab[runtime]) and restart tatolabd")
                return
            self._origins = {"loopback": moq.OriginProducer(), "public": moq.OriginProducer()}
            self._set_upstream(self.upstream)
        await self._listen(want_loopback=bool(wanted), want_public=any(s.public for s in wanted.values()))
        for path in list(self._outputs):
            serve = wanted.get(path)
            if serve is None:
                self._drop(path, ("loopback", "public"), "no longer exposed")
            elif not serve.public and "public" in self._outputs[path].broadcasts:
                self._drop(path, ("public",), "now private")
        for path, serve in wanted.items():
            output = self._outputs.get(path)
            if output is None:
                output = self._outputs[path] = _Output(serve)
            elif output.serve.out is not serve.out:  # the stream was loaded again: new rings
                output.serve = serve
                self._stop_feeding(output)
            output.serve = serve
            added = False
            init = await self._parameter_sets(serve) if serve.video else None
            for kind in ("loopback", "public") if serve.public else ("loopback",):
                if kind not in output.broadcasts:
                    broadcast = self._origins[kind].create_broadcast(path)
                    output.tracks[kind] = broadcast.publish_track(TRACK)
                    if init is not None:
                        output.videos[kind] = self._publish_video(broadcast, init)
                    broadcast.announce()
                    output.broadcasts[kind] = broadcast
                    added = True
            if added:  # private -> public: the feeder waits for the new track's subscribers too
                self._stop_feeding(output)
            if output.task is None or output.task.done():
                output.task = self._loop.create_task(self._feed(output))

    async def _parameter_sets(self, serve: Serve) -> bytes | None:
        """The SPS/PPS the encoder will send for ``serve``'s frame size (nothing is encoded; made off
        this loop, once per size). They seed its video track, so the catalog lists the track before
        anyone subscribes, as players need; each keyframe carries its own (avc3), so frames of
        another size still decode (only the catalog's coded size is then off)."""
        if serve.size not in self._seeds:
            try:
                self._seeds[serve.size] = await self._loop.run_in_executor(
                    None, Encoder(paths.surface_pool()).parameter_sets, *serve.size)
            except RuntimeError as exc:
                self._say("warning", f"MoQ relay: {serve.path} is served without its video track: {exc}")
                return None
        return self._seeds[serve.size]

    @staticmethod
    def _publish_video(broadcast: Any, init: bytes) -> Any:
        """A video output's H.264 track in the moq-dev media format (it also writes the catalog)."""
        import moq

        return broadcast.publish_video(moq.VideoFormat.AVC3, init, track=VIDEO_TRACK,
                                       hint=moq.VideoHint(optimize_for_latency=True))

    async def _listen(self, want_loopback: bool, want_public: bool) -> None:
        if not want_loopback and not want_public:
            await self._stop_listening()
            return
        self._certificate()
        wants = {"loopback": [config.LOOPBACK] if want_loopback else [],
                 "public": self.public_hosts[:1] if want_public else []}
        for kind, hosts in wants.items():
            if not hosts and kind in self._listeners:
                await self._stop_listener(kind)
            elif hosts and kind not in self._listeners:
                await self._start_listener(kind, hosts[0])
        if self._renewing is None:
            self._renewing = self._loop.create_task(self._renew())

    async def _start_listener(self, kind: str, host: str) -> None:
        import moq

        assert self.cert is not None
        server = moq.Server(config.bind(host, self.port), tls_cert=[str(self.cert.cert)], tls_key=[str(self.cert.key)],
                            publish=self._origins[kind])
        try:
            await server.__aenter__()
        except Exception as exc:
            self._say("error", f"MoQ relay: cannot listen on udp {config.bind(host, self.port)} ({kind}): {exc}. "
                      "Set TATOLAB_MOQ_PORT to a free port (and TATOLAB_MOQ_PUBLIC to this machine's addresses), "
                      "then restart tatolabd", port=self.port, host=host)
            return
        listener = self._listeners[kind] = _Listener(kind, host, server)
        listener.task = self._loop.create_task(self._accept(listener))
        if kind == "loopback":
            try:
                listener.page = await viewer.serve(host, self.port, self._page_outputs)
            except OSError as exc:
                self._say("warning", f"MoQ relay: no viewer page on tcp {config.bind(host, self.port)}: {exc}")
        self._say("info", f"MoQ relay serving {'public' if kind == 'public' else 'exposed'} outputs on udp "
                  f"{server.local_addr}; certificate sha-256 {self.cert.fingerprint} (until "
                  f"{self.cert.not_after:%Y-%m-%d %H:%M} UTC)", fingerprint=self.cert.fingerprint,
                  listen=server.local_addr)

    async def _stop_listener(self, kind: str) -> None:
        listener = self._listeners.pop(kind)
        if listener.page is not None:
            listener.page.close()
        if listener.task is not None:
            listener.task.cancel()
        await listener.server.__aexit__(None, None, None)
        self._cut(lambda r: r.kind == kind)

    async def _stop_listening(self) -> None:
        for kind in list(self._listeners):
            await self._stop_listener(kind)

    async def _accept(self, listener: _Listener) -> None:
        async def one(request: Any) -> None:
            path = request.path.strip("/")
            try:
                session = await request.accept()
            except Exception:
                return
            reader = _Reader(listener.kind, path, session)
            with self._lock:
                self._readers.append(reader)
            try:
                await session.closed()
            except Exception:
                pass  # how a reader left changes nothing here
            finally:
                sent = reader.sent()
                with self._lock:
                    if reader in self._readers:
                        self._readers.remove(reader)
                        self._closed_bytes[path] = self._closed_bytes.get(path, 0) + sent

        pending: set[asyncio.Task] = set()
        try:
            async for request in listener.server:
                task = self._loop.create_task(one(request))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            for task in pending:
                task.cancel()

    def _cut(self, which: Callable[[_Reader], bool]) -> None:
        with self._lock:
            cut = [r for r in self._readers if which(r)]
        for reader in cut:
            try:
                reader.session.cancel(CUT)
            except Exception:
                pass

    def _drop(self, path: str, kinds: tuple[str, ...], why: str) -> None:
        """Stop serving ``path`` on ``kinds`` of listener, cutting the readers there at once."""
        output = self._outputs[path]
        for kind in kinds:
            broadcast = output.broadcasts.pop(kind, None)
            output.tracks.pop(kind, None)
            output.videos.pop(kind, None)
            if broadcast is not None:
                broadcast.close()
        self._cut(lambda r: r.path == path and r.kind in kinds)
        if not output.broadcasts:
            self._stop_feeding(output)
            del self._outputs[path]

    def _stop_feeding(self, output: _Output) -> None:
        if output.task is not None:
            output.task.cancel()
            output.stopping, output.task = output.task, None

    async def _feed(self, output: _Output) -> None:
        """Read the output's ring only while some track of it has a subscriber."""
        if output.stopping is not None:  # never two feeders writing the same bags
            await asyncio.gather(output.stopping, return_exceptions=True)
            output.stopping = None
        while True:
            demands = [track.demand() for track in output.producers()]
            if not demands:
                return
            if not any(d.is_used() for d in demands):
                waits = [self._loop.create_task(d.used()) for d in demands]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for wait in waits:
                        wait.cancel()
                continue
            out = output.serve.out
            try:
                index = await self._on_main(claim_reader, out)
            except RingError as exc:
                self._say("warning", f"MoQ relay cannot read {output.serve.path}: {exc}")
                await asyncio.Event().wait()  # until the next sync replaces or drops this output
            output.reader_index = index
            stop = threading.Event()
            pumped: asyncio.Future = self._loop.create_future()

            def pump() -> None:
                try:
                    self._pump(output, out.base, index, stop)
                    outcome: BaseException | None = None
                except BaseException as exc:  # told to the relay's loop below
                    outcome = exc
                self._loop.call_soon_threadsafe(lambda: pumped.done() or pumped.set_result(outcome))

            threading.Thread(target=pump, name=f"tatolab-moq-feed {output.serve.path}", daemon=True).start()
            try:
                failed = await asyncio.shield(pumped)
                if isinstance(failed, RingError):  # the stream stopped under us; the next sync drops it
                    self._say("info", f"MoQ relay stopped reading {output.serve.path}: {failed}")
                    await asyncio.Event().wait()
                elif failed is not None:
                    self._say("error", f"MoQ relay stopped reading {output.serve.path}: {failed!r}")
                    await asyncio.Event().wait()
            finally:
                stop.set()
                await asyncio.shield(pumped)  # the reader is closed before its record is given back
                if output.reader_index == index:
                    output.reader_index = None
                await asyncio.shield(self._on_main(release_reader, out, index))

    @staticmethod
    def _pump(output: _Output, base: str, index: int, stop: threading.Event) -> None:
        """On a thread of its own: ring -> the tracks that have subscribers, each bag one frame,
        until none has (or ``stop``). A video output's bags are also encoded to H.264 for its
        video tracks while any of them has a subscriber: one encode, shared by every reader.
        Writing to a track is thread-safe (moq-rs)."""
        reader = RingReader(base, index, "ordered", start="now")
        demands: dict[int, tuple[Any, Any]] = {}
        encoder: Encoder | None = None
        try:
            while not stop.is_set():
                tracks = output.producers()
                if len(demands) != len(tracks) or any(id(t) not in demands for t in tracks):
                    demands = {id(t): (t, t.demand()) for t in tracks}
                used = [t for t, d in demands.values() if d.is_used()]
                if not used:
                    return
                videos = [t for t in used if any(t is v for v in output.videos.values())]
                bags = [t for t in used if not any(t is v for v in output.videos.values())]
                if videos and encoder is None:
                    encoder = Encoder(paths.surface_pool())
                    output.encoding = True
                    output.encodes += 1
                elif not videos and encoder is not None:
                    encoder.dispose()  # the last video reader left: the encoder stops
                    encoder = None
                    output.encoding = False
                if bags:
                    got = reader.read()
                else:  # video only: the newest frame; an encoder behind its source skips, never lags
                    backlog = reader.read_many()
                    got = backlog[-1] if backlog else None
                    if len(backlog) > 1:
                        reader.discard(len(backlog) - 1)
                        output.frames_skipped += len(backlog) - 1
                if got is None:
                    reader.wait(WAIT_S)
                    continue
                payload, publish_ns = got
                for track in bags:
                    track.write_frame(payload, publish_ns // 1000)
                if bags:
                    output.bags_sent += 1
                if encoder is not None:
                    for data, stamp_us, _keyframe in encoder.encode(payload):
                        for video in videos:
                            video.write_frame(data, stamp_us)  # groups start at its keyframes
                    output.frames_encoded, output.encoder = encoder.frames, encoder.name
        finally:
            if encoder is not None:
                encoder.dispose()
                output.encoding = False
            reader.close()

    # -- reading other runtimes' outputs (URL links) ----------------------------------------------

    def _sync_pulls(self, wanted: dict[PullId, Pull]) -> None:
        for pull_id in list(self._pulls):
            pull, task = self._pulls[pull_id]
            if wanted.get(pull_id) != pull:
                task.cancel()
                del self._pulls[pull_id]
        for pull_id, pull in wanted.items():
            if pull_id not in self._pulls:
                self._pulls[pull_id] = (pull, self._loop.create_task(self._pull(pull)))

    def _pull_state(self, pull: Pull, waiting: str | None) -> None:
        self._main.call_soon_threadsafe(self.on_pull_state, pull, waiting)

    async def _pull(self, pull: Pull) -> None:
        """Read the broadcast at ``pull.url`` into ``pull.base``, dialling again with backoff."""
        try:
            import moq
        except ImportError:
            self._pull_state(pull, "the moq-rs package is missing from the runtime's install; "
                             "reinstall the runtime with its extras (tatolab[runtime]) and restart tatolabd")
            return
        writer = RingWriter(pull.base)
        delay = BACKOFF_S[0]
        while True:
            try:
                async with moq.Client(pull.url, tls_fingerprints=[pull.fingerprint] if pull.fingerprint else None,
                                      websocket_enabled=False, reconnect=False) as client:
                    delay = BACKOFF_S[0]
                    reading = self._loop.create_task(self._read_broadcast(pull, client, writer))
                    closed = self._loop.create_task(client.session.closed())
                    try:
                        done, _ = await asyncio.wait({reading, closed}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        reading.cancel()
                        closed.cancel()
                    for task in done:
                        task.result()  # its error, if any, says why
                    raise ConnectionError("the connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                text = str(exc) or type(exc).__name__
                self._pull_state(pull, f"cannot read {pull.url}: {text}; dialling again in {delay:g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])

    async def _read_broadcast(self, pull: Pull, client: Any, writer: RingWriter) -> None:
        import moq

        while True:
            available = self._loop.create_task(client.announced_broadcast(pull.path).available())
            try:
                done, _ = await asyncio.wait({available}, timeout=NOT_SERVED_S)
                if not done:
                    self._pull_state(pull, f"{pull.url} does not serve {pull.path} (not exposed there, or its "
                                     "stream is not running); waiting for it")
                broadcast = await available
            finally:
                available.cancel()
            # a staleness allowance: without one, a group that arrives after a newer one is skipped
            track = await broadcast.subscribe_track(TRACK, moq.Subscription(max_age_us=KEEP_US))
            self._pull_state(pull, None)
            while True:
                frame = await track.read_frame()
                if frame is None:
                    break
                writer.write(frame.payload)
            self._pull_state(pull, f"{pull.url} stopped serving {pull.path}; waiting for it")

    # -- a relay on the internet (relay join) ---------------------------------------------------

    def _set_upstream(self, url: str | None) -> None:
        if self._upstream_task is not None:
            self._upstream_task.cancel()
            self._upstream_task = None
        if url is None:
            self.upstream_state = "not joined"
        elif self._origins:  # else: from the first exposure on
            self._upstream_task = self._loop.create_task(self._publish_upstream(url))

    async def _publish_upstream(self, url: str) -> None:
        """Announce the public outputs to the relay at ``url``; its subscribers' demand reaches our
        tracks like a local reader's. Dials again with backoff when the relay goes away."""
        import moq

        from tatolab._runtime.relay.pulls import split_url

        dial, pinned, _path = split_url(url)
        delay = BACKOFF_S[0]
        while True:
            self.upstream_state = f"connecting to {dial}"
            try:
                async with moq.Client(dial, tls_fingerprints=[pinned] if pinned else None, websocket_enabled=False,
                                      reconnect=False, publish=self._origins["public"]) as client:
                    delay = BACKOFF_S[0]
                    self.upstream_state = "connected"
                    self._say("info", f"MoQ relay: publishing this machine's public outputs to {dial}")
                    await client.session.closed()
                    raise ConnectionError("the connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                text = str(exc) or type(exc).__name__
                self.upstream_state = f"cannot reach {dial}: {text}; dialling again in {delay:g} s"
                self._say("warning", f"MoQ relay: {self.upstream_state}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_S[1])

    async def _renew(self) -> None:
        """Renew the certificate before it expires; listeners restart with the new one (readers reconnect)."""
        while True:
            await asyncio.sleep(RENEW_CHECK_S)
            if self.cert is None or not self.cert.due():
                continue
            self._certificate()
            want = {o.serve.path: o.serve for o in self._outputs.values()}
            await self._stop_listening()
            self._say("info", f"MoQ relay certificate renewed: sha-256 {self.cert.fingerprint}")
            self._request_sync(want)  # listens again, with the new certificate

    async def _close(self) -> None:
        self._set_upstream(None)
        for _pull, task in self._pulls.values():
            task.cancel()
        self._pulls.clear()
        if self._syncing is not None:
            self._syncing.cancel()
        if self._renewing is not None:
            self._renewing.cancel()
        for path in list(self._outputs):
            self._drop(path, ("loopback", "public"), "the runtime is stopping")
        await self._stop_listening()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
