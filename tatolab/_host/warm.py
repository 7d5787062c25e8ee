"""A warm interpreter: ``python -m tatolab._host.warm FD``, one per project ``.venv``, started by the runtime.

It imports the node host, the SDK and the compiler (never a user's module), then waits on
the socket ``FD`` (a SOCK_SEQPACKET pair the runtime made). Each request is one JSON
message with its file descriptors attached: run ``python -m MODULE ARGS`` in a fresh
process, with this environment and working folder, these descriptors as 0, 1, 2 (and 3,
the node host's log pipe). The server forks; the child becomes what a cold
``python -m MODULE`` would have been, without paying for Python's start and the imports.

What a cold start gives is kept:
- a session of its own (setsid), so the node leads a process group that ends with it;
- its own environment (``os.environ`` replaced, so the C library's too), working folder,
  ``sys.argv`` and ``sys.path[0]`` (the working folder, as ``-m`` puts it);
- no descriptor of the server's or of another node's (each is closed in the child);
- nothing of a user's: the server never imports a project module, so each child (each
  node, each version during ``dev``) imports the project's code afresh;
- death with the runtime: the server dies with the runtime (parent-death signal) and the
  node host asks for the same with the server as its parent, so a killed runtime takes both.

The messages are typed in tatolab/_model/warm.py. Replies: ``{"id", "pid"}`` with the child's pidfd attached (the runtime signals through it,
so a recycled pid is never hit), or ``{"id", "error"}``; then ``{"exit": pid, "code": c}``
when a child ends (``c`` negative: killed by that signal, as ``subprocess`` says it).
Before each fork it checks that nothing it read at start changed since (tatolab's and
msgspec's files, the ``.venv``'s site-packages folders, whose ``.pth`` files only a start
reads); if something did, it says so and the runtime starts a fresh one.
Interpreter-wide settings read at start (``PYTHON*`` variables, the locale) cannot change
after start: the runtime keeps one server per ``.venv`` and set of those variables.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import socket
import sys
import time

# What every node and compile imports anyway: imported once here, shared by every child.
import tatolab._host.main  # noqa: F401
import tatolab._host.runner  # noqa: F401
import tatolab._sdk.builder  # noqa: F401  (what tatolab._compile needs; it runs as __main__ itself)
import tatolab.stream  # noqa: F401
from tatolab._host.orphans import die_with_parent
from tatolab._model.warm import (Exited, Ready, Refused, Reply, Spawn, Spawned, Stale, WarmMessageProblem, encode,
                                 read_request, request_id)

MAX_FDS = 8
MAX_MESSAGE = 4 * 1024 * 1024
# python -P (or PYTHONSAFEPATH) puts nothing first on sys.path: a warm start keeps that; 3.10 has no -P
if sys.version_info >= (3, 11):
    _SAFE_PATH = sys.flags.safe_path
else:
    _SAFE_PATH = False


def _preloaded_files() -> dict[str, tuple[int, int]]:
    """The files of the modules imported above, to notice a reinstall of them, and the
    site-packages folders, to notice an install (a new ``.pth`` file is read only at start)."""
    import site

    stamps = {}
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        try:
            st = os.stat(folder)
        except OSError:
            continue
        stamps[folder] = (st.st_mtime_ns, st.st_ino)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not (name == "tatolab" or name.startswith(("tatolab.", "msgspec"))):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        stamps[path] = (st.st_mtime_ns, st.st_ino)
    return stamps


def _stale(stamps: dict[str, tuple[int, int]]) -> str | None:
    for path, stamp in stamps.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_ino) != stamp:
            return path
    return None


class _Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ)
        self.children: dict[int, int] = {}  # pidfd -> pid
        self.stamps = _preloaded_files()

    def send(self, message: Reply, fds: list[int] | None = None) -> None:
        data = encode(message)
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.send(data)

    def serve(self) -> tuple[Spawn, list[int]] | None:
        """Answer requests until the runtime hangs up (returns None), or, in a forked child,
        return the request that child is to run and its descriptors."""
        self.send(Ready(os.getpid()))
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.sock:
                    try:
                        data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, MAX_FDS)
                    except OSError:
                        return None
                    if not data:
                        return None  # the runtime is gone; our children die with us
                    try:
                        request = read_request(data)
                    except WarmMessageProblem as exc:
                        for fd in fds:
                            os.close(fd)
                        number = request_id(data)
                        if number is None:  # no asker to answer: said, and the runtime sees us end
                            print(exc, file=sys.stderr, flush=True)
                            return None
                        self.send(Refused(number, str(exc)))
                        continue
                    if self._spawn(request, fds):
                        return request, fds  # we are the child now
                else:
                    self._reap(key.fd)

    def _spawn(self, request: Spawn, fds: list[int]) -> bool:
        """Fork a child for ``request``: True in the child."""
        stale = _stale(self.stamps)
        if stale is not None:
            for fd in fds:
                os.close(fd)
            self.send(Stale(request.id, f"{stale} changed since this interpreter imported it"))
            return False
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            self.send(Refused(request.id, f"fork failed: {exc}"))
            return False
        if pid == 0:
            os.setsid()  # first of all: the runtime may signal the node's group as soon as it has the pid
            return True
        for fd in fds:
            os.close(fd)  # the child's now; a copy here would hold its pipes open
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # cannot happen before we reap it; say so rather than lose it
            self.send(Refused(request.id, f"pidfd_open failed: {exc}"))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        self.children[pidfd] = pid
        self.selector.register(pidfd, selectors.EVENT_READ)
        self.send(Spawned(request.id, pid), [pidfd])
        return False

    def _reap(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self.send(Exited(pid, os.waitstatus_to_exitcode(status)))

    def become_child(self) -> None:
        """In the child: drop everything of the server's, so only the request's descriptors stay."""
        self.selector.close()
        for pidfd in self.children:
            os.close(pidfd)
        self.sock.close()


def _become(request: Spawn, fds: list[int], server: int) -> None:
    """Turn this forked child into ``python -m MODULE ARGS`` as the request describes."""
    die_with_parent(server)  # a fork does not inherit the parent-death signal
    targets = request.targets
    # first out of the way (a received descriptor may already sit on a target number), then in place
    high = [os.dup(fd) for fd in fds]
    for fd in fds:
        os.close(fd)
    for fd, target in zip(high, targets):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.closerange(max(targets) + 1, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
    os.environ.clear()
    os.environ.update(request.env)
    os.chdir(request.cwd)
    time.tzset()
    if request.module == "-c":  # `python -c CODE ARGS`
        if not _SAFE_PATH:
            sys.path[0] = ""  # what `python -c` puts first
        sys.argv = ["-c", *request.args[1:]]
        _set_cmdline([request.python, "-c", *request.args])
        return
    if not _SAFE_PATH:
        sys.path[0] = os.getcwd()  # what `python -m` puts first: the folder it started in
    sys.argv = [request.module, *request.args]
    _set_cmdline([request.python, "-m", request.module, *request.args])


def _set_cmdline(argv: list[str]) -> None:
    """Show ``argv`` in ps and /proc/PID/cmdline, as a cold start would: the server's own argument
    area (padded by the runtime for this) is overwritten the way setproctitle(3) does it."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    title = " ".join(argv).encode(errors="replace")[: size - 2]
    # the title ends at its NUL; a last byte that is not NUL tells the kernel it was rewritten
    ctypes.memmove(start, title + b"\0" * (size - len(title) - 1) + b" ", size)


def main() -> None:
    fd = int(sys.argv[1])
    parent = os.environ.pop("TATOLAB_PARENT_PID", None)
    die_with_parent(int(parent) if parent else None)
    sock = socket.socket(fileno=fd)
    server = _Server(sock)
    pid = os.getpid()
    job = server.serve()
    if job is None:
        return
    request, fds = job
    server.become_child()
    del server, sock
    _become(request, fds, pid)
    if request.module == "-c":
        import builtins
        import types

        main_module = types.ModuleType("__main__")
        main_module.__builtins__ = builtins  # type: ignore[attr-defined]
        sys.modules["__main__"] = main_module
        exec(compile(request.args[0], "<string>", "exec"), main_module.__dict__)
        return
    import runpy

    runpy.run_module(request.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
