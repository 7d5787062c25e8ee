"""Starting a project's Python processes (node hosts, compiles): the one process starter.

``ProcessStarter.start(python, module, args, ...)`` is ``python -m module args`` (module
``"-c"``: ``python -c args[0] args[1:]``) in a fresh
process of its own session; what comes back behaves like ``asyncio.subprocess.Process``
(``pid``, ``returncode``, ``stdin``/``stdout``/``stderr``, ``wait()``, ``communicate()``,
``kill()``, ``send_signal()``) plus ``exited``, a future set when the process itself ended
(whoever still holds its pipes).

- ``ColdStarter`` execs the interpreter each time.
- ``WarmStarter`` forks from a warm interpreter (tatolab/_host/warm.py), one per project
  ``.venv`` and set of start-time variables, so a start skips Python's start and imports;
  where that interpreter cannot run (a ``.venv`` whose tatolab predates it) it starts cold.
  ``TATOLAB_WARM=0`` in the runtime's environment turns it off.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from tatolab import _settings as settings
from tatolab._host.orphans import die_with_parent
from tatolab._model.warm import (Exited, Ready, Refused, Spawn, Spawned, Stale, WarmMessageProblem, encode,
                                 read_reply)
from tatolab._runtime.core.warm import Key, WarmBook, key_of

TITLE_ROOM = " " * 200  # room in the argument area for a child's own command line (warm.py)
LOG_FD = 3  # where a warm child finds the node host's log pipe
READY_TIMEOUT_S = 30.0
_START_VARS = ("LANG", "LANGUAGE", "HOME")  # read by Python at start, like every PYTHON* and LC_* one


class Started(Protocol):
    pid: int
    returncode: int | None
    exited: asyncio.Future

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...

    @property
    def stderr(self) -> asyncio.StreamReader | None: ...

    def kill(self) -> None: ...

    def send_signal(self, sig: int) -> None: ...

    def close_pipes(self) -> None: ...

    async def wait(self) -> int: ...

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]: ...


class ProcessStarter(Protocol):
    async def start(self, python: Path, module: str, args: list[str], *, cwd: Path, env: Mapping[str, str],
                    log_fd: int | None = None, stdin: bool = True, limit: int = 2**16) -> Started: ...

    async def close(self) -> None: ...


class _ExitWatch(asyncio.subprocess.SubprocessStreamProtocol):
    """The child's pipes, plus a future set the moment the process is reaped.

    ``Process.wait()`` also waits for the pipes to close, and a helper the node started holds
    them open after the node died: the supervisor goes by the exit alone.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.pipes = transport

    def close_pipes(self) -> None:
        if self.pipes is not None:
            self.pipes.close()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class ColdStarter:
    """``python -m module`` by exec, every time."""

    async def start(self, python: Path, module: str, args: list[str], *, cwd: Path, env: Mapping[str, str],
                    log_fd: int | None = None, stdin: bool = True, limit: int = 2**16) -> Started:
        env = dict(env)
        if log_fd is not None:  # the node host's own variables (it reads and drops them)
            env["TATOLAB_LOG_FD"] = str(log_fd)
            env["TATOLAB_PARENT_PID"] = str(os.getpid())
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitWatch(limit, loop), str(python), *(["-c"] if module == "-c" else ["-m", module]), *args,
            cwd=cwd, env=env, pass_fds=(log_fd,) if log_fd is not None else (),
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=die_with_parent, start_new_session=True,
        )
        process = asyncio.subprocess.Process(transport, protocol, loop)
        process.exited = protocol.exited  # type: ignore[attr-defined]
        process.close_pipes = protocol.close_pipes  # type: ignore[attr-defined]
        return process  # type: ignore[return-value]

    async def close(self) -> None:
        return None


class WarmProcess:
    """A child of a warm interpreter, seen from the runtime (which is not its parent)."""

    def __init__(self, pid: int, pidfd: int, stdin: asyncio.StreamWriter | None,
                 stdout: tuple[asyncio.StreamReader, asyncio.BaseTransport],
                 stderr: tuple[asyncio.StreamReader, asyncio.BaseTransport]) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd
        self.stdin = stdin
        self.stdout, out = stdout
        self.stderr, err = stderr
        self._pipes = [out, err]
        self.returncode: int | None = None
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _ended(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if not self.exited.done():
            self.exited.set_result(None)

    def send_signal(self, sig: int) -> None:
        if self._pidfd is None:
            return  # already reaped: the pid may be someone else's by now
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close_pipes(self) -> None:
        if self.stdin is not None:
            self.stdin.close()
        for pipe in self._pipes:
            pipe.close()

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    async def wait(self) -> int:
        await asyncio.shield(self.exited)
        assert self.returncode is not None
        return self.returncode

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        out, err = await asyncio.gather(self.stdout.read(), self.stderr.read())
        await self.wait()
        return out, err


class _Stale(Exception):
    pass


class WarmServer:
    """One warm interpreter and the socket to it."""

    def __init__(self, python: Path, env: dict[str, str]) -> None:
        self.python = python
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.pid = 0
        self.sock: socket.socket | None = None
        self.alive = False
        self.last_used = time.monotonic()
        self.children: dict[int, WarmProcess] = {}
        self._pending: dict[int, asyncio.Future] = {}
        self._ids = 0
        # children whose start was answered but not yet registered by spawn(), and their exit code
        # if it came first (a compile can end before spawn() resumes on a busy runtime)
        self._unclaimed: dict[int, int | None] = {}
        self._out: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self._writing = False
        self._ready: asyncio.Future | None = None
        self.problem: str | None = None  # a message of its that did not fit: why it is no longer used
        self._drain: asyncio.Task | None = None
        self.retiring = False  # replaced (its files changed): it starts nothing more, and ends with its last child
        self._closing: asyncio.Future | None = None
        self._ended_retired: Callable[[], None] = lambda: None

    def retire(self, ended: Callable[[], None]) -> None:
        """Start nothing more; end once no child of it runs (never kill them: other streams' nodes),
        then call ``ended``."""
        self.retiring = True
        self._ended_retired = ended
        self._retire_if_done()

    def _retire_if_done(self) -> None:
        if self.retiring and not self.children and not self._unclaimed and not self._pending and self._closing is None:
            self._closing = asyncio.ensure_future(self.close())
            self._closing.add_done_callback(lambda _: self._ended_retired())

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(self.env, TATOLAB_PARENT_PID=str(os.getpid()))
        try:
            self.process = await asyncio.create_subprocess_exec(
                str(self.python), "-m", "tatolab._host.warm", str(theirs.fileno()), TITLE_ROOM,
                env=env, cwd="/", pass_fds=(theirs.fileno(),), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent, start_new_session=True,  # no terminal's Ctrl-C reaches it
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.alive = True
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._readable)
        exited = asyncio.ensure_future(self.process.wait())
        try:
            done, _ = await asyncio.wait({self._ready, exited}, timeout=READY_TIMEOUT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._ready not in done or self._ready.exception() is not None:
                if self.process.returncode is None:
                    self.process.kill()  # it did not answer in time: what it said so far is all there is
                why = (await self.process.stderr.read()).decode(errors="replace").strip()  # type: ignore[union-attr]
                raise OSError(why.splitlines()[-1] if why else "the warm interpreter did not start")
        except BaseException:
            await self.close()
            raise
        finally:
            exited.cancel()
        self.pid = self._ready.result()
        self._drain = asyncio.ensure_future(self.process.stderr.read())  # type: ignore[union-attr]

    def _readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 65536, 4)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._lost()
                return
            try:
                message = read_reply(data)
            except WarmMessageProblem as exc:  # another tatolab's interpreter: its starts fail, they start cold
                for fd in fds:
                    os.close(fd)
                self.problem = str(exc)
                self._lost(self.problem)
                asyncio.ensure_future(self.close())
                return
            if isinstance(message, Ready):
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(message.ready)
            elif isinstance(message, Exited):
                child = self.children.pop(message.exit, None)
                if child is not None:
                    child._ended(message.code)
                    self._retire_if_done()
                elif message.exit in self._unclaimed:
                    # it ended before its spawn() got as far as registering it: kept for spawn() to find
                    self._unclaimed[message.exit] = message.code
            else:
                future = self._pending.pop(message.id, None)
                if future is not None and not future.done():
                    if isinstance(message, Spawned):
                        self._unclaimed[message.pid] = None
                    future.set_result((message, fds))
                    if not isinstance(message, Spawned):
                        self._retire_if_done()
                else:  # its asker gave up (cancelled): the child must not run untracked
                    for fd in fds:
                        if isinstance(message, Spawned):
                            try:
                                signal.pidfd_send_signal(fd, signal.SIGKILL)
                            except OSError:
                                pass
                        os.close(fd)

    def _lost(self, why: str = "the warm interpreter ended") -> None:
        """The warm interpreter is gone (or, ``why``, no longer understood): its children died with
        it (parent-death signal)."""
        if not self.alive:
            return
        self.alive = False
        loop = asyncio.get_running_loop()
        if self.sock is not None:
            loop.remove_reader(self.sock.fileno())
            if self._writing:
                loop.remove_writer(self.sock.fileno())
        for future in self._pending.values():
            if not future.done():
                future.set_exception(OSError(why))
        self._pending.clear()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(OSError(why))
        for child in self.children.values():
            child._ended(-signal.SIGKILL)
        self.children.clear()
        for _, fds in self._out:
            for fd in fds:
                os.close(fd)
        self._out.clear()
        self._retire_if_done()

    def _send(self, data: bytes, fds: list[int]) -> None:
        self._out.append((data, fds))
        self._flush()

    def _flush(self) -> None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        while self._out:
            data, fds = self._out[0]
            try:
                socket.send_fds(self.sock, [data], fds)
            except BlockingIOError:
                if not self._writing:
                    loop.add_writer(self.sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError:
                self._lost()
                return
            self._out.popleft()
            for fd in fds:
                os.close(fd)  # the child's ends travel in the message
        if self._writing:
            loop.remove_writer(self.sock.fileno())
            self._writing = False

    async def spawn(self, module: str, args: list[str], *, cwd: Path, env: Mapping[str, str], log_fd: int | None,
                    stdin: bool, limit: int) -> WarmProcess:
        if not self.alive or self.retiring:
            raise OSError("the warm interpreter ended")
        self.last_used = time.monotonic()
        loop = asyncio.get_running_loop()
        env = dict(env)
        in_r, in_w = os.pipe() if stdin else (os.open(os.devnull, os.O_RDONLY), -1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        theirs = [in_r, out_w, err_w]
        targets = [0, 1, 2]
        if log_fd is not None:
            theirs.append(os.dup(log_fd))
            targets.append(LOG_FD)
            env["TATOLAB_LOG_FD"] = str(LOG_FD)
            env["TATOLAB_PARENT_PID"] = str(self.pid)
        ours = [fd for fd in (in_w, out_r, err_r) if fd >= 0]
        self._ids += 1
        request_id = self._ids
        future = loop.create_future()
        self._pending[request_id] = future
        request = Spawn(id=request_id, python=str(self.python), module=module, args=args, cwd=str(cwd), env=env,
                        targets=targets)
        self._send(encode(request), theirs)
        try:
            message, fds = await future
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        if not isinstance(message, Spawned):
            for fd in ours:
                os.close(fd)
            if isinstance(message, Stale):
                raise _Stale(message.stale)
            raise OSError(message.error if isinstance(message, Refused) else f"the warm interpreter answered {message}")
        pid = message.pid
        try:
            stdout = await _reader(out_r, limit)
            stderr = await _reader(err_r, limit)
            writer = await _writer(in_w) if stdin else None
            child = WarmProcess(pid, fds[0], writer, stdout, stderr)
        except BaseException:  # cancelled half-way: the child must not run untracked
            self._unclaimed.pop(pid, None)
            try:
                signal.pidfd_send_signal(fds[0], signal.SIGKILL)
            except OSError:
                pass
            os.close(fds[0])
            raise
        code = self._unclaimed.pop(pid, None)
        if code is not None:
            child._ended(code)
            self._retire_if_done()
        elif self.alive:
            self.children[pid] = child
        else:
            child._ended(-signal.SIGKILL)  # the warm interpreter ended meanwhile, and its children with it
        return child

    async def close(self) -> None:
        if self.sock is not None:
            self._lost()
            self.sock.close()
            self.sock = None
        if self.process is not None and self.process.returncode is None:
            try:
                await asyncio.wait_for(self.process.wait(), 2.0)  # it ends when the socket closes
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._drain is not None:
            self._drain.cancel()


async def _reader(fd: int, limit: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(fd, "rb", buffering=0))
    return reader, transport


async def _writer(fd: int) -> asyncio.StreamWriter:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(fd, "wb", buffering=0))
    return asyncio.StreamWriter(transport, protocol, None, loop)


def start_vars(env: Mapping[str, str]) -> dict[str, str]:
    """The variables Python reads once at start: children of one warm interpreter share them."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_", "TATOLAB_NODE_OF")) or k in _START_VARS}


def _quiet(level: str, message: str, **fields: object) -> None:
    pass


class WarmStarter:
    """Starts from a warm interpreter where one serves; which one, and when a .venv starts cold, is
    the bookkeeping's (core/warm.py)."""

    def __init__(self, cold: ColdStarter | None = None) -> None:
        self.cold = cold or ColdStarter()
        self.book: WarmBook[WarmServer] = WarmBook()
        self.say = _quiet  # the runtime's log (tatolabd sets it)
        self._opening: dict[Key, asyncio.Future] = {}

    @property
    def servers(self) -> dict[Key, WarmServer]:
        return self.book.serving

    async def start(self, python: Path, module: str, args: list[str], *, cwd: Path, env: Mapping[str, str],
                    log_fd: int | None = None, stdin: bool = True, limit: int = 2**16) -> Started:
        venv = os.path.realpath(python.parent.parent)  # one .venv, whatever the symlinks to it
        if self.book.warm_allowed(venv, time.monotonic()):
            key = key_of(venv, start_vars(env))
            for _ in range(2):  # a stale interpreter (tatolab reinstalled) is replaced once
                server = await self._server(python, key, env)
                if server is None:
                    break
                try:
                    return await server.spawn(module, args, cwd=cwd, env=env, log_fd=log_fd, stdin=stdin,
                                              limit=limit)
                except _Stale as stale:
                    self.book.forget(key, server)
                    self._retire(server, venv, str(stale))
                except OSError:
                    self.book.forget(key, server)
                    if server.problem is not None:  # it speaks another tatolab's messages: cold for a while
                        self.book.failed_at(venv, time.monotonic())
                        self.say("warning", server.problem, venv=venv)
                    break
        return await self.cold.start(python, module, args, cwd=cwd, env=env, log_fd=log_fd, stdin=stdin, limit=limit)

    def _retire(self, server: WarmServer, venv: str, why: str) -> None:
        """A new SDK (or package) in ``venv``: the next start uses a fresh interpreter; this one stays
        the parent of the nodes it started, which run on, and ends with the last of them."""
        if not self.book.retire(server):
            return
        running = len(server.children)
        self.say("info", f"a new SDK or package in {venv} was picked up ({why}): nodes start from a fresh warm "
                 f"interpreter now; the one before it (pid {server.pid}) ends once the "
                 f"{running} node{'' if running == 1 else 's'} it started end{'s' if running == 1 else ''}",
                 venv=venv, old_pid=server.pid, running=running)
        server.retire(lambda: self.book.ended(server))

    async def _server(self, python: Path, key: Key, env: Mapping[str, str]) -> WarmServer | None:
        server = self.book.serving.get(key)
        if server is not None and server.alive:
            return server
        opening = self._opening.get(key)
        if opening is not None:  # nodes of one stream starting at once share the one start
            return await asyncio.shield(opening)
        future = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        server = WarmServer(python, {**start_vars(env), "PATH": env.get("PATH", os.defpath)})  # the rest is each child's own
        try:
            await server.open()
        except OSError:
            self.book.failed_at(key[0], time.monotonic())
            if server.problem is not None:
                self.say("warning", server.problem, venv=key[0])
            server = None
        else:
            for idle in self.book.opened(key, server, time.monotonic()):
                asyncio.ensure_future(idle.close())
        finally:
            self._opening.pop(key, None)
            future.set_result(server)
        return server

    async def close(self) -> None:
        await asyncio.gather(*(server.close() for server in self.book.close_all()), return_exceptions=True)


_shared: ProcessStarter | None = None


def shared() -> ProcessStarter:
    """The runtime's starter (warm unless TATOLAB_WARM=0)."""
    global _shared
    if _shared is None:
        _shared = ColdStarter() if settings.value("TATOLAB_WARM") == "0" else WarmStarter()
    return _shared


async def next_event(process: Started) -> dict[str, Any] | None:
    """The next JSON line a helper process (the recorder, the Foxglove server) writes on its stdout; None
    once it has closed it. Lines that are not JSON (a library's own print) are passed over."""
    assert process.stdout is not None
    while True:
        line = await process.stdout.readline()
        if not line:
            return None
        try:
            return json.loads(line)
        except ValueError:
            continue
