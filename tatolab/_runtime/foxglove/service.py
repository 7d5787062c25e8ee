"""The runtime's side of the Foxglove server (main.py): started on the first ``foxglove`` ask,
told the exposed outputs at each change, lending its feeds reader records of their rings, ended
with the runtime. Its token is made when the runtime starts and lives as long as it does: the
link ``foxglove`` prints is the only way in (server.py).

Everything here runs on the runtime's loop and only passes lines: no frame, no socket of the
Foxglove server's, and no encoder is ever in the runtime's process.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable

from tatolab._control import paths
from tatolab._control.errors import ControlError
from tatolab._links.ring import RingError
from tatolab._runtime.foxglove.server import links
from tatolab._runtime.lifecycle.nodes import claim_reader, release_reader
from tatolab._runtime.processes.starter import ProcessStarter, Started, next_event
from tatolab._runtime.relay.wanted import Serve

HOST = "127.0.0.1"
START_WAIT_S = 30.0


class Foxglove:
    def __init__(self, starter: ProcessStarter, say: Callable[..., None], port: int) -> None:
        self.starter = starter
        self.say = say
        self.port_wanted = port
        self.token = secrets.token_urlsafe(24)
        self.process: Started | None = None
        self.port: int | None = None
        self.outputs: dict[str, Serve] = {}  # <stream>/<node>/<port> -> the exposed output
        self.lent: dict[tuple[str, int], Serve] = {}  # (address, reader index) -> whose ring
        self._starting: asyncio.Lock = asyncio.Lock()
        self._follow: asyncio.Task | None = None

    def links(self) -> tuple[str, str]:
        assert self.port is not None
        return links(HOST, self.port, self.token)

    async def ensure(self) -> None:
        """Serving (started now if it was not); ControlError when it cannot listen."""
        async with self._starting:
            if self.process is not None and self.process.returncode is None:
                return
            process = await self.starter.start(Path(sys.executable), "tatolab._runtime.foxglove.main", [], cwd=Path("/"),
                                               env=dict(os.environ))
            assert process.stdin is not None
            config = {"token": self.token, "host": HOST, "port": self.port_wanted, "pool": paths.surface_pool()}
            process.stdin.write((json.dumps(config) + "\n").encode())
            try:
                first = await asyncio.wait_for(next_event(process), START_WAIT_S)
            except asyncio.TimeoutError:
                first = {"error": "it did not start listening in time"}
            if not first or first.get("event") != "serving":
                process.kill()
                await process.wait()
                why = (first or {}).get("error") or "the Foxglove server ended as it started"
                raise ControlError(f"the Foxglove server is not serving: {why}", code="foxglove_not_serving",
                                   details={"setting": "TATOLAB_FOXGLOVE_PORT"})
            self.process, self.port = process, int(first["port"])
            self.say("info", f"Foxglove server listening on {HOST}:{self.port} (pid {process.pid})",
                     foxglove_pid=process.pid)
            self._follow = asyncio.ensure_future(self._follow_events(process))
            self._tell_outputs()
            if process.stderr is not None:
                asyncio.ensure_future(self._log(process))

    def sync(self, wanted: dict[str, Serve]) -> None:
        """The exposed outputs from now on (the runtime's rewire)."""
        self.outputs = {serve.path.split("/", 1)[1]: serve for serve in wanted.values()}
        self._tell_outputs()

    def _tell_outputs(self) -> None:
        if self.process is not None and self.process.returncode is None and self.process.stdin is not None:
            outputs = {address: serve.out.base for address, serve in self.outputs.items()}
            self._write({"outputs": outputs})

    def _write(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
        except (OSError, RuntimeError):
            pass  # it ended: _follow_events gives its readers back

    async def _follow_events(self, process: Started) -> None:
        try:
            while (event := await next_event(process)) is not None:
                if event.get("event") == "claim":
                    self._claim(str(event.get("address")))
                elif event.get("event") == "release":
                    self._release(str(event.get("address")), int(event.get("index", -1)))
        finally:
            code = await process.wait()
            for (_address, index), serve in list(self.lent.items()):
                release_reader(serve.out, index)
            self.lent.clear()
            if self.process is process:
                self.process, self.port = None, None
                self.say("warning" if code else "info", f"the Foxglove server (pid {process.pid}) ended "
                         f"(exit {code}); the next ask for a Foxglove link starts it again")

    def _claim(self, address: str) -> None:
        serve = self.outputs.get(address)
        if serve is None:
            self._write({"reader": address, "error": f"{address} is not exposed any more"})
            return
        try:
            index = claim_reader(serve.out)
        except RingError as exc:
            self._write({"reader": address, "error": str(exc)})
            return
        self.lent[(address, index)] = serve
        self._write({"reader": address, "index": index})

    def _release(self, address: str, index: int) -> None:
        serve = self.lent.pop((address, index), None)
        if serve is not None:
            release_reader(serve.out, index)

    async def _log(self, process: Started) -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            text = line.decode(errors="replace").rstrip()
            if text:
                self.say("info", f"Foxglove server: {text}", foxglove_pid=process.pid)

    async def close(self) -> None:
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # its end: it stops serving and gives its readers back
        try:
            await asyncio.wait_for(process.wait(), 5)
        except asyncio.TimeoutError:
            process.kill()
        if self._follow is not None:
            await asyncio.gather(self._follow, return_exceptions=True)

