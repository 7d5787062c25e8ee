"""One Python node's OS process: start it, read what it says, restart it with backoff."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from tatolab import _records
from tatolab._host import spec as host_spec
from tatolab._host.status import NodeStatus
from tatolab._runtime.processes import groups
from tatolab._runtime.rules import health
from tatolab._runtime.rules.health import NodeState
from tatolab._runtime.processes.environment import stream_env
from tatolab._runtime.stored.logs import StreamLog
from tatolab._runtime.processes.starter import ProcessStarter, Started
from tatolab._runtime.processes.starter import shared as shared_starter

STABLE_AFTER_S = 10.0  # a node that ran this long starts its backoff afresh
STOP_GRACE_S = 3.0
PUMP_DRAIN_S = 1.0
LINE_LIMIT = 1024 * 1024
STACK_DUMP_WAIT_S = 0.3  # a hung node gets this long to dump its stacks (SIGUSR1) before SIGKILL


async def _exit_code(process: Started) -> int:
    """The process's exit, by its end alone: a helper the node started may still hold its pipes."""
    await asyncio.shield(process.exited)
    assert process.returncode is not None
    return process.returncode


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class NodeProcess:
    def __init__(self, *, stream: str, spec: host_spec.HostSpec, python: Path, project: Path, log: StreamLog,
                 env: dict[str, str] | None = None, starter: ProcessStarter | None = None) -> None:
        self.stream = stream
        self.starter = starter or shared_starter()
        self.env = env  # the loading command's environment (None: the runtime's own)
        self.name = spec["node"]
        self.spec = spec
        self.python = python
        self.project = project
        self.log = log
        self.state = NodeState.STARTING
        self.restarts = 0
        self.last_error: str | None = None
        self.cannot_run: str | None = None  # the host's one line when the node can never run (state failed)
        self.process: Started | None = None
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._spawning: asyncio.Future[Started] | None = None
        # health: the watchdog reads the status file the node host writes around process()
        self.watchdog_ms = health.watchdog_limit_ms(spec.get("execution", "reactive"), spec.get("watchdog_ms"))
        self.memory_limit = health.memory_limit_bytes(spec.get("memory_limit_mb"))
        self.status: NodeStatus | None = None
        # link key -> why this node stopped reading it (a ring that made no sense), as its host said
        self.broken_links: dict[str, str] = {}
        self.busy_since_ns = 0
        self.hangs = 0
        self.memory_restarts = 0
        self.crash_streak = 0
        self._kill_reason: str | None = None
        self.imports: set[str] | None = None  # what the running process imported (None: not told yet)
        self.imported_files: set[str] = set()  # the real paths of the project's files among them
        self.metrics: dict[str, Any] = {}  # what the node says about itself (ctx.report), shown in graph
        self._ps: psutil.Process | None = None  # kept between calls so cpu_percent measures an interval

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.returncode is None else None

    def usage(self) -> dict[str, Any]:
        """CPU (percent since the previous call) and resident memory of the running process."""
        pid = self.pid
        if pid is None:
            return {"cpu_percent": None, "memory_bytes": None}
        try:
            if self._ps is None or self._ps.pid != pid:
                self._ps = psutil.Process(pid)
            with self._ps.oneshot():
                return {"cpu_percent": self._ps.cpu_percent(None), "memory_bytes": self._ps.memory_info().rss}
        except psutil.Error:
            return {"cpu_percent": None, "memory_bytes": None}

    def ready_ns(self) -> int:
        """When this node's process made its first ``process()`` call (0: not yet)."""
        if self.status is None or self.pid is None:
            return 0
        return self.status.ready_ns()

    def set_up_ns(self) -> int:
        """When this node's process finished its ``setup()`` (0: not yet)."""
        if self.status is None or self.pid is None:
            return 0
        return self.status.set_up_ns()

    def busy_ms(self) -> float | None:
        """How long the running process() call has lasted, read live; None when idle."""
        if self.status is None or self.pid is None:
            return None
        return health.busy_ms(self.status.busy_since_ns(), time.monotonic_ns())

    def start(self) -> None:
        status_path = self.spec.get("status")
        if status_path:
            self.status = NodeStatus(status_path)
        self._task = asyncio.create_task(self._supervise(), name=f"node {self.stream}/{self.name}")

    def send(self, message: host_spec.Message) -> None:
        """A control message for the running node (add or remove a link)."""
        process = self.process
        if process and process.stdin and process.returncode is None:
            process.stdin.write(host_spec.encode(message))

    async def stop(self) -> None:
        self._stopping = True
        if self._spawning is not None:
            try:
                self.process = await self._spawning
            except OSError:
                pass
        process = self.process
        if process is not None and process.returncode is None:
            try:
                process.stdin.write(host_spec.encode(host_spec.STOP))  # type: ignore[union-attr]
                process.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, ConnectionResetError, AttributeError):
                pass
            try:
                await asyncio.wait_for(_exit_code(process), STOP_GRACE_S)
            except asyncio.TimeoutError:
                self.log.say(f"node {self.name} did not stop within {STOP_GRACE_S:g} s; killing it",
                             level="warning", node=self.name)
                process.kill()
                await _exit_code(process)
        if process is not None:
            groups.kill_group(process.pid)  # whatever the node started ends with it
        task = self._task
        if task is not None:
            if self.state == NodeState.RESTARTING:
                task.cancel()  # waiting out a backoff: nothing left to read
            # otherwise let it read what the node said last (teardown's output, a traceback)
            done, _ = await asyncio.wait({task}, timeout=PUMP_DRAIN_S)
            if not done:
                task.cancel()
                await asyncio.wait({task})
        self.state = NodeState.STOPPED
        if self.status is not None:
            self.status.close()
            self.status = None

    async def _supervise(self) -> None:
        while not self._stopping:
            started = time.monotonic()
            code = await self._run_once()
            if self._stopping:
                break
            if code == host_spec.EXIT_CANNOT_RUN and self._kill_reason is None:
                # its configuration can never work: the host said why in one line; restarting
                # could only fail the same way, so it stays failed until its stream changes
                self.state = NodeState.FAILED
                self.last_error = self.cannot_run or self.last_error or "it cannot run with this configuration"
                return
            if self._kill_reason is not None:
                how = f"was {self._kill_reason.split(':', 1)[0]} and was killed"
                self.last_error = self._kill_reason
                self._kill_reason = None
            elif code == 0:
                how = "returned"
                self.last_error = self.last_error or "the node process ended by itself"
            else:
                how = describe_exit(code)
                if code < 0 or not self.last_error:
                    self.last_error = f"node process {how}"
            if time.monotonic() - started > STABLE_AFTER_S:
                self.crash_streak = 0
            self.crash_streak += 1
            self.state = health.state_after_exit(self.crash_streak)
            delay = health.restart_delay_s(self.crash_streak)
            when = f"in {delay:.1f} s" if delay else "now"
            self.log.say(
                f"node {self.name} of stream {self.stream} {how}; restarting it {when}",
                level="error", node=self.name, restarts=self.restarts + 1,
            )
            if delay:
                await asyncio.sleep(delay)
            self.restarts += 1
        self.state = NodeState.STOPPED

    async def _run_once(self) -> int:
        try:
            read_fd, write_fd = os.pipe()
        except OSError as exc:  # no descriptor left: counted as a failed start, retried after the backoff
            self.last_error = f"could not start node {self.name}: {exc.strerror or exc}"
            return 127
        self.imports = None
        self.cannot_run = None
        self.imported_files = set()
        self.metrics = {}
        self.broken_links = {}  # a new process opens every link afresh
        env = stream_env(self.env)
        self.state = NodeState.STARTING
        # Spawning is shielded: a stop() arriving meanwhile waits for the process and ends it,
        # rather than cancelling the spawn half-way and leaving a node nobody tracks.
        # A session of its own (the starter sees to it): the node leads a process group that ends with it.
        self._spawning = asyncio.ensure_future(self.starter.start(
            self.python, "tatolab._host", [f"{self.stream}/{self.name}"],
            cwd=self.project, env=env, log_fd=write_fd, limit=LINE_LIMIT,
        ))
        try:
            process = await asyncio.shield(self._spawning)
        except OSError as exc:
            os.close(read_fd)
            self.last_error = f"could not start {self.python}: {exc}"
            return 127
        finally:
            os.close(write_fd)
            self._spawning = None
        self.process = process
        groups.remember(process.pid)
        try:
            process.stdin.write(host_spec.encode(self.spec))  # type: ignore[union-attr]
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died at once: its exit says how
        self.state = NodeState.RUNNING
        records = asyncio.create_task(self._pump_records(read_fd))
        out = asyncio.create_task(self._pump_lines(process.stdout, "info", "stdout"))
        err = asyncio.create_task(self._pump_lines(process.stderr, "warning", "stderr"))
        watch = asyncio.create_task(self._watch(process))
        code = await _exit_code(process)
        watch.cancel()
        groups.kill_group(process.pid)  # a helper it started must not hold its pipes (or live on)
        groups.forget(process.pid)
        pumps = {records, out, err}
        # what the node said last is read, but no descendant that left the group can hold us up
        _, late = await asyncio.wait(pumps, timeout=PUMP_DRAIN_S)
        for task in late:
            task.cancel()
        await asyncio.gather(*pumps, watch, return_exceptions=True)
        process.close_pipes()  # its pipes, even where an escaped descendant still holds the other end
        if self.status is not None:
            self.status.reset()  # a killed node died inside process(); its successor starts idle
        return code

    async def _watch(self, process: Started) -> None:
        """Restart the node when its process() call outlasts the watchdog or it outgrows its memory limit."""
        while process.returncode is None and not self._stopping:
            await asyncio.sleep(health.POLL_S)
            if process.returncode is not None or self._stopping:
                return
            verdict = None
            if self.status is not None:
                verdict = health.hung(self.status.busy_since_ns(), time.monotonic_ns(), self.watchdog_ms)
                if verdict is not None:
                    self.hangs += 1
            if verdict is None and self.memory_limit is not None:
                try:
                    rss = psutil.Process(process.pid).memory_info().rss
                except psutil.Error:
                    rss = None
                verdict = health.over_memory(rss, self.memory_limit)
                if verdict is not None:
                    self.memory_restarts += 1
            if verdict is None:
                continue
            self._kill_reason = verdict.reason
            self.last_error = verdict.reason
            self.log.say(
                f"node {self.name} of stream {self.stream} is {verdict.reason}; restarting it",
                level="error", node=self.name, health=verdict.trouble.value,
            )
            if verdict.trouble is health.Trouble.HUNG:
                try:
                    process.send_signal(signal.SIGUSR1)  # its stacks go to stderr, so to the log
                    await asyncio.wait_for(asyncio.shield(process.exited), STACK_DUMP_WAIT_S)
                except (ProcessLookupError, asyncio.TimeoutError):
                    pass
            if process.returncode is None:
                process.kill()
            return

    async def _pump_records(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            async for line in reader:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "imports" in record:  # for dev's partial reload, not for the log
                    self._imported(record)
                    continue
                if "metrics" in record:  # ctx.report: for graph, not for the log
                    if isinstance(record["metrics"], dict):
                        self.metrics.update(record["metrics"])
                    continue
                if record.get("level") in ("error", "critical"):
                    self.last_error = record.get("message")
                    if isinstance(record.get("fields"), dict) and record["fields"].get("cannot_run"):
                        self.cannot_run = str(record.get("message"))
                fields = record.get("fields")
                if isinstance(fields, dict) and fields.get("broken") and isinstance(fields.get("link"), str):
                    self.broken_links[fields["link"]] = str(record.get("message", "it stopped reading it"))
                self.log.emit(record)
        finally:
            transport.close()

    def _imported(self, message: dict[str, Any]) -> None:
        names = message.get("imports")
        files = message.get("files")
        if not isinstance(names, list):
            return
        files = [f for f in files if isinstance(f, str)] if isinstance(files, list) else []
        if message.get("all"):
            self.imports = set(names)
            self.imported_files = set(files)
        elif self.imports is not None:
            self.imports.update(names)
            self.imported_files.update(files)

    async def _pump_lines(self, stream: asyncio.StreamReader | None, level: str, source: str) -> None:
        if stream is None:
            return
        async for line in stream:
            text = line.decode(errors="replace").rstrip("\n")
            if text:
                self.log.emit(_records.make_record(
                    text, level=level, stream=self.stream, node=self.name, fields={"source": source}))
