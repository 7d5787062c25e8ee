"""``python -m tatolab._recorder``: one recording, in a process of its own the runtime starts.

The runtime claims a reader record on each output's ring and sends the spec as one JSON line
on stdin; this process reads those rings like any other reader (ordered by default: never
slowing a writer, counting what it missed), writes the MCAP file, and reports on stdout as JSON
lines: ``recording`` (the file is open), ``progress`` (twice a second), ``end`` (the summary).
A ``stop`` line, stdin closing, or SIGTERM ends it cleanly: the file is finished and indexed.
Recording before and after triggers (window.py), a ``trigger`` line is a trigger now.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

from tatolab._recorder.recorder import Recorder, Spec


def _say(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        spec = Spec.parse(json.loads(sys.stdin.readline()))
    except (ValueError, KeyError, TypeError) as exc:
        _say({"event": "error", "error": f"bad recording spec: {exc}"})
        return 2
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runtime says when to stop: a second Ctrl-C cannot cut the file

    try:
        recorder = Recorder(spec)
    except OSError as exc:
        _say({"event": "error", "error": f"cannot write {spec.path}: {exc.strerror or exc}"})
        return 1
    except ValueError as exc:  # a --when expression it does not evaluate
        _say({"event": "error", "error": str(exc)})
        return 2

    def watch_stdin() -> None:
        for command in sys.stdin:
            if command.strip() == "stop":
                break
            if command.strip() == "trigger":
                recorder.triggers.put(time.monotonic_ns())
        stopping.set()

    threading.Thread(target=watch_stdin, name="stop-watch", daemon=True).start()
    _say({"event": "recording", "path": str(recorder.path), "pid": os.getpid()})
    reason = recorder.run(stopping, lambda summary: _say({"event": "progress", **summary}))
    _say({"event": "end", **recorder.close(reason)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
