"""``run_with_recording``: a stream run with a recording in place of its source, for a test.

The stream is loaded attached into the user's runtime under a name of its own, the node named
``replace`` compiled as a ``McapSource`` over ``recording`` (any port of it names the replay's
one output), and the output ``collect`` recorded until ``count`` bags; hanging up unloads it.
Reading the bags back needs the ``mcap`` library in the test's environment (``tatolab[record]``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tatolab._sdk.builder import STAND_INS_ENV


def run_with_recording(
    project: str | os.PathLike[str],
    *,
    replace: str,
    recording: str | os.PathLike[str],
    collect: str,
    count: int,
    address: str | None = None,
    speed: float = 0.0,
    target: str | None = None,
    timeout: float = 60.0,
) -> list[dict[str, Any]]:
    """Run the stream of ``project`` with node ``replace`` played from ``recording`` (its channel
    ``address``, or its only one; ``speed`` 0: as fast as the stream takes it) and return the first
    ``count`` bags the output ``collect`` (``<node>/<port>``) writes, within ``timeout`` seconds
    (fewer when it runs out). Frames come back as their bag plus ``pixels`` (the RGBA bytes)."""
    try:
        from tatolab._recorder.reading import Recording, bag_of
    except ImportError:
        raise ImportError("run_with_recording reads the bags back with the mcap library: add it to the "
                          "test's environment with `uv add --dev 'tatolab[record]'`") from None
    from tatolab._control.client import Client

    project = Path(project).resolve()
    source = {"path": str(Path(project, recording).resolve()), "address": address, "speed": speed}
    name = f"test-{replace}-{os.getpid()}"
    env = {**os.environ, STAND_INS_ENV: json.dumps({replace: source})}
    running = Client()
    try:
        running.request("load", project=str(project), target=target, name=name, mode="attached", env=env)
        with tempfile.TemporaryDirectory(prefix="tatolab-test-") as folder:
            out = Path(folder) / "collected.mcap"
            row = Client().request("record_start", addresses=[f"{name}/{collect}"], out=str(out), bags=count,
                                   seconds=timeout, start="beginning")
            watch = Client()
            try:
                watch.request("record_watch", id=row["id"], stop_on_hangup=True)
                for event in watch.events():
                    if event.get("event") == "end":
                        break
            finally:
                watch.close()
            file = Recording(out)
            try:
                if not file.channels:
                    return []  # nothing was written to it in time
                channel = file.channel(None)
                bags = []
                for _, data in file.messages(channel, None, None):
                    bag, pixels = bag_of(channel, data)
                    bags.append(bag if pixels is None else {**bag, "pixels": pixels})
                return bags[:count]
            finally:
                file.close()
    finally:
        running.close()  # hanging up unloads the stream
