"""The reaper: however tatolabd ends, nothing its nodes started lives on.

A node leads a process group of its own, and what it starts (a helper in `setup`) is in that
group. While the runtime runs, it kills a node's group when the node exits (supervisor.py). A
runtime killed outright (SIGKILL, the OOM killer) kills nothing: its nodes die with it (their
parent-death signal), and their helpers would live on. So tatolabd starts one small process,
in a session of its own, whose stdin is the read end of a pipe whose write end only tatolabd
holds (close-on-exec: no node inherits it). It is a shell waiting in `read`: end of file on
that pipe is tatolabd gone, however it went, and the shell then becomes this module, which
ends every group listed in `<socket folder>/nodes/` (groups.reap_remembered: what the next
runtime does at its start) and exits. At a clean stop tatolabd has ended the groups itself
and ends the reaper.

One waiting shell a runtime (~0.2 MiB), not a guard forked per node: a forked guard kept its
own copy of every page its node or the warm parent wrote after the fork (~2 MiB a node,
bench/start.py), and a Python process waiting costs ~5 MiB. Should the reaper die (an OOM
kill), tatolabd starts another; should both be killed, the next runtime still ends the
groups at its start.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any, Callable

MODULE = "tatolab._runtime.processes.reaper"
SHELL = "/bin/sh"
# `read` returns at end of file (nothing is ever written); $0 is the runtime's Python
WAIT_THEN_REAP = f'read _; exec "$0" -m {MODULE}'
RESTART_DELAY_S = 1.0


class Reaper:
    """tatolabd's side: starts the reaper, starts another when one dies, ends it at a clean stop."""

    def __init__(self, say: Callable[..., Any]) -> None:
        self.say = say
        self.process: asyncio.subprocess.Process | None = None
        self._write_fd: int | None = None
        self._watching: asyncio.Task | None = None
        self._stopping = False

    async def start(self) -> None:
        read_fd, write_fd = os.pipe()  # both close-on-exec: only the reaper's stdin is a copy of one
        try:
            self.process = await asyncio.create_subprocess_exec(
                SHELL, "-c", WAIT_THEN_REAP, sys.executable, stdin=read_fd, stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(write_fd)
            self.say("warning", f"could not start the reaper ({exc}); if this runtime is killed, the next one "
                     "ends what its nodes started", error=str(exc))
            return
        finally:
            os.close(read_fd)
        self._write_fd = write_fd
        self._watching = asyncio.create_task(self._again_when_it_ends(self.process), name="reaper")

    async def _again_when_it_ends(self, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self._stopping:
            return
        self._close_pipe()
        self.say("warning", f"the reaper (pid {process.pid}) ended with {code}; starting another",
                 pid=process.pid, code=code)
        await asyncio.sleep(RESTART_DELAY_S)
        if not self._stopping:
            await self.start()

    def _close_pipe(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    async def stop(self) -> None:
        """End the reaper unused: at a clean stop the runtime has ended its groups itself."""
        self._stopping = True
        process = self.process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        self._close_pipe()
        if self._watching is not None:
            await asyncio.gather(self._watching, return_exceptions=True)


def main() -> None:
    """What the reaper becomes once tatolabd is gone."""
    from tatolab._runtime.processes import groups

    groups.reap_remembered()


if __name__ == "__main__":
    main()
