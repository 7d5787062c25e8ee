"""One Python node's OS process: start it, read what it says, restart it with backoff."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from tatolab import _records
from tatolab._host.orphans import die_with_parent
from tatolab._runtime.compiler import child_env
from tatolab._runtime.logs import StreamLog

FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
STABLE_AFTER_S = 10.0  # a node that ran this long starts its backoff afresh
STOP_GRACE_S = 3.0
LINE_LIMIT = 1024 * 1024


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class NodeProcess:
    def __init__(self, *, stream: str, spec: dict[str, Any], python: Path, project: Path, log: StreamLog) -> None:
        self.stream = stream
        self.name = spec["node"]
        self.spec = spec
        self.python = python
        self.project = project
        self.log = log
        self.state = "starting"
        self.restarts = 0
        self.last_error: str | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._task: asyncio.Task | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.returncode is None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"node {self.stream}/{self.name}")

    def send(self, message: dict[str, Any]) -> None:
        """A control message for the running node (add or remove a link)."""
        process = self.process
        if process and process.stdin and process.returncode is None:
            process.stdin.write((json.dumps(message) + "\n").encode())

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is not None and process.returncode is None:
            try:
                process.stdin.write(b'{"op":"stop"}\n')  # type: ignore[union-attr]
                process.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, ConnectionResetError, AttributeError):
                pass
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE_S)
            except asyncio.TimeoutError:
                self.log.say(f"node {self.name} did not stop within {STOP_GRACE_S:g} s; killing it",
                             level="warning", node=self.name)
                process.kill()
                await process.wait()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.state = "stopped"

    async def _supervise(self) -> None:
        backoff = FIRST_BACKOFF_S
        while not self._stopping:
            started = time.monotonic()
            code = await self._run_once()
            if self._stopping:
                break
            if code == 0:
                how = "returned"
                self.last_error = self.last_error or "the node process ended by itself"
            else:
                how = describe_exit(code)
                if code < 0 or not self.last_error:
                    self.last_error = f"node process {how}"
            if time.monotonic() - started > STABLE_AFTER_S:
                backoff = FIRST_BACKOFF_S
            self.state = "restarting"
            self.log.say(
                f"node {self.name} of stream {self.stream} {how}; restarting it in {backoff:.1f} s",
                level="error", node=self.name, restarts=self.restarts + 1,
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            self.restarts += 1
        self.state = "stopped"

    async def _run_once(self) -> int:
        read_fd, write_fd = os.pipe()
        env = child_env()
        env["TATOLAB_LOG_FD"] = str(write_fd)
        env["TATOLAB_PARENT_PID"] = str(os.getpid())
        self.state = "starting"
        try:
            self.process = await asyncio.create_subprocess_exec(
                str(self.python), "-m", "tatolab._host", f"{self.stream}/{self.name}",
                cwd=self.project, env=env, pass_fds=(write_fd,),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            self.last_error = f"could not start {self.python}: {exc}"
            return 127
        finally:
            if self.process is not None:
                os.close(write_fd)
        process = self.process
        process.stdin.write((json.dumps(self.spec) + "\n").encode())  # type: ignore[union-attr]
        self.state = "running"
        records = asyncio.create_task(self._pump_records(read_fd))
        out = asyncio.create_task(self._pump_lines(process.stdout, "info", "stdout"))
        err = asyncio.create_task(self._pump_lines(process.stderr, "warning", "stderr"))
        code = await process.wait()
        await asyncio.gather(records, out, err, return_exceptions=True)
        return code

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
                if record.get("level") in ("error", "critical"):
                    self.last_error = record.get("message")
                self.log.emit(record)
        finally:
            transport.close()

    async def _pump_lines(self, stream: asyncio.StreamReader | None, level: str, source: str) -> None:
        if stream is None:
            return
        async for line in stream:
            text = line.decode(errors="replace").rstrip("\n")
            if text:
                self.log.emit(_records.make_record(
                    text, level=level, stream=self.stream, node=self.name, fields={"source": source}))
