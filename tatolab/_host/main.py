"""The node host: one process per Python node, started from the project's .venv.

The runtime starts ``python -m tatolab._host`` with the node's spec as the first line
on stdin; later lines are control messages (add or remove a link, stop). Log records
go as JSON lines to the file descriptor named by ``TATOLAB_LOG_FD``. What the node writes to
``sys.stdout`` and ``sys.stderr`` (``print``, warnings) becomes records on that same descriptor,
so a print and the traceback that follows it stay in the order they were written; only what
is written to file descriptors 1 and 2 directly (C libraries, child processes) reaches the
runtime through the stdout and stderr pipes.
"""

from __future__ import annotations

import faulthandler
import io
import logging
import os
import queue
import signal
import sys
import threading
import traceback
from typing import Any

from tatolab import _records
from tatolab._classpath import load_class
from tatolab._errors import CannotRun, ConfigError
from tatolab._host.failing import cannot_run_line
from tatolab._hints import missing_module_line
from tatolab._host.imports import ImportReporter
from tatolab._host.orphans import die_with_parent
from tatolab._host.spec import EXIT_CANNOT_RUN, Message, SpecProblem, read_message, read_spec
from tatolab._source_imports import from_source

EXIT_CRASHED = 1
EXIT_BAD_NODE = 3


class _RecordSink:
    def __init__(self, fd: int | None, stream: str, node: str) -> None:
        self._file = os.fdopen(fd, "w", buffering=1, encoding="utf-8") if fd is not None else sys.stderr
        self._lock = threading.Lock()
        self.stream = stream
        self.node = node

    def emit(self, level: str, message: str, fields: dict[str, Any] | None = None) -> None:
        record = _records.make_record(message, level=level, stream=self.stream, node=self.node, fields=fields)
        self.send(record)

    def send(self, message: dict[str, Any]) -> None:
        """A record, or a message for the runtime alone (``{"imports": ...}``: see imports.py)."""
        line = _records.dumps(message) + "\n"
        with self._lock:
            try:
                self._file.write(line)
            except (BrokenPipeError, ValueError):
                pass


class _LineWriter(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of a node: each line becomes a record on the sink."""

    MAX_LINE = 128 * 1024  # longer lines are cut: a record of one, JSON-escaped, stays within supervisor.LINE_LIMIT

    def __init__(self, sink: _RecordSink, original: Any, level: str, source: str) -> None:
        super().__init__()
        self._sink = sink
        self._original = original
        self._level = level
        self._source = source
        self._pending = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def buffer(self) -> Any:
        return self._original.buffer  # bytes written there go straight to the pipe

    def fileno(self) -> int:
        return self._original.fileno()  # faulthandler and child processes write to the fd itself

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            if len(self._pending) >= self.MAX_LINE:
                lines.append(self._pending)
                self._pending = ""
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        pass  # a line is one record: text without its newline waits for the rest of its line

    def drain(self) -> None:
        """Emit a last line that never got its newline (before a crash record, at exit)."""
        with self._lock:
            line, self._pending = self._pending, ""
        self._emit(line)

    def _emit(self, line: str) -> None:
        if line:
            self._sink.emit(self._level, line[: self.MAX_LINE], {"source": self._source})


class _LoggingBridge(logging.Handler):
    """Python ``logging`` inside a node becomes records naming the node."""

    def __init__(self, sink: _RecordSink) -> None:
        super().__init__()
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        fields: dict[str, Any] = {"logger": record.name}
        if record.exc_info:
            fields["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        self.sink.emit(record.levelname.lower(), record.getMessage(), fields)


class _Control:
    """Reads control messages from stdin on a thread of its own."""

    def __init__(self, on_stop: Any = None, node: str = "?") -> None:
        self.messages: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.node = node
        self.stopping = threading.Event()
        # Held until the stop: sleep() is one acquire with a timeout (Event.wait builds a
        # Condition and a lock per call, ~1.5 us more, spent between a continuous node's write
        # and its sleep, while a reader woken onto its core waits for the core).
        self._gate = threading.Lock()
        self._gate.acquire()
        self._on_stop = on_stop  # wakes the node's thread if it sleeps on its inputs
        threading.Thread(target=self._run, name="tatolab-control", daemon=True).start()

    def stop(self, wake: bool = True) -> None:
        """Stop the node: the runtime asked or stdin closed (any thread), or a signal (`wake`
        False: the handler runs on the node's own thread, whose wait the signal already ended)."""
        if not self.stopping.is_set():
            self.stopping.set()
            try:
                self._gate.release()
            except RuntimeError:
                pass  # another thread's stop released it first
        if wake and self._on_stop is not None:
            self._on_stop()

    def sleep(self, seconds: float) -> bool:
        """Sleep `seconds`, or until the stop; True once stopping."""
        if self._gate.acquire(True, seconds):
            self._gate.release()
            return True
        return False

    def _run(self) -> None:
        for line in sys.stdin:
            try:
                message = read_message(line, self.node)
            except SpecProblem as exc:  # said, and left: the node goes on with the links it has
                print(exc, file=sys.stderr, flush=True)
                continue
            if message["op"] == "stop":
                self.stop()
            else:
                self.messages.put(message)
        self.stop()  # stdin closed: the runtime is gone or wants us gone


def import_from(project: str, sources: str | None) -> None:
    """Put the project's modules first on the import path: a kept stream's snapshot of them
    when there is one (the live files stay out of reach), else the project folder."""
    if sources:
        live = {"", project, os.path.realpath(project), os.getcwd()}
        sys.path[:] = [entry for entry in sys.path if entry not in live]
    sys.path.insert(0, sources or project)
    from_source(sources or project)


def main() -> None:
    # the runtime's variables for this host, read once and gone before any user code runs
    parent = os.environ.pop("TATOLAB_PARENT_PID", None)
    log_fd = os.environ.pop("TATOLAB_LOG_FD", None)
    die_with_parent(int(parent) if parent else None)
    first = sys.stdin.readline()
    try:
        spec = read_spec(first)
    except SpecProblem as exc:  # a line of another tatolab's: said once, never restarted
        _RecordSink(int(log_fd) if log_fd else None, exc.stream or "?", exc.node or "?").emit(
            "error", str(exc), {"cannot_run": True})
        sys.exit(EXIT_CANNOT_RUN)
    if "op" in spec:  # Stop: only it has an op
        return  # stopped before it was given its node
    sink = _RecordSink(int(log_fd) if log_fd else None, spec["stream"], spec["node"])
    logging.basicConfig(level=logging.INFO, handlers=[_LoggingBridge(sink)], force=True)
    if log_fd:
        sys.stdout = _LineWriter(sink, sys.stdout, "info", "stdout")
        sys.stderr = _LineWriter(sink, sys.stderr, "warning", "stderr")
    imports = ImportReporter(sink.send, spec["project"])
    imports.install()
    if not spec.get("builtin"):  # a built-in runs the runtime's code: nothing of the project's shadows it
        import_from(spec["project"], spec.get("sources"))
    os.chdir(spec["project"])

    try:
        from tatolab._host.runner import NodeRunner

        node_class = load_class(spec["class"])
        runner = NodeRunner(spec, node_class, sink)
        imports.flush()
    except (CannotRun, ConfigError) as exc:  # its config can never work: said once, never restarted
        cannot_run(sink, spec["node"], exc)
    except Exception as exc:
        _drain_output()
        sink.emit(
            "error",
            f"node {spec['node']} could not start: {missing_module_line(exc, spec['project'], spec.get('sources')) or exc}",
            {"traceback": traceback.format_exc()},
        )
        sys.exit(EXIT_BAD_NODE)

    # The runtime's watchdog sends SIGUSR1 before killing a hung node: the stacks land in the
    # log. faulthandler dumps from its C handler, so it works while a C call holds the GIL.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    control = _Control(on_stop=runner.wake, node=spec["node"])
    signal.signal(signal.SIGTERM, lambda *_: control.stop(wake=False))
    signal.signal(signal.SIGINT, lambda *_: control.stop(wake=False))
    try:
        runner.run(control)
    except CannotRun as exc:
        cannot_run(sink, spec["node"], exc)
    except Exception as exc:
        _drain_output()
        sink.emit(
            "error",
            f"node {spec['node']} raised {type(exc).__name__}: {exc}"
            + (f"; {hint}" if (hint := missing_module_line(exc, spec["project"], spec.get("sources"))) else ""),
            {"traceback": traceback.format_exc()},
        )
        sys.exit(EXIT_CRASHED)
    _drain_output()
    sys.exit(0)


def cannot_run(sink: _RecordSink, node: str, exc: BaseException) -> None:
    """End the node once, with one line: the runtime shows it failed and does not restart it."""
    _drain_output()
    sink.emit("error", cannot_run_line(node, exc), {"cannot_run": True})
    sys.exit(EXIT_CANNOT_RUN)


def _drain_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _LineWriter):
            stream.drain()
        else:
            stream.flush()
