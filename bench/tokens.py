"""What a token costs a MoQ session's set-up: the relay's own accept loop (listen.py, with the
per-token views of scopes.py) timed with its token check, and with the check replaced by a grant
handed out unchecked (as before tokens), in one run, interleaved.

    .venv/bin/python bench/tokens.py [--sessions 30]

Each session: a moq-rs client dials the loopback relay, the relay accepts it, and the client waits
for the output's broadcast to be announced to it (what a reader does before it subscribes).
Prints the medians (and p90) of both, the check alone (Keeper.check, µs), and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/moq.py is not moq
sys.path.insert(0, str(HERE.parent))

import moq  # noqa: E402

from tatolab._runtime.relay import cert as certs  # noqa: E402
from tatolab._runtime.relay.bridge import Bridge  # noqa: E402
from tatolab._runtime.relay.feed import Output  # noqa: E402
from tatolab._runtime.relay.listen import Listeners  # noqa: E402
from tatolab._runtime.relay.scopes import Scopes  # noqa: E402
from tatolab._runtime.relay.tokens import Grant, Keeper, with_token  # noqa: E402
from tatolab._runtime.relay.wanted import Serve  # noqa: E402
from tatolab._runtime.lifecycle.streams import OutputRing  # noqa: E402

PATH = "bench/source/blob/blobs"


async def one(url: str, fingerprint: str) -> float:
    start = time.perf_counter()
    async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False, reconnect=False) as client:
        await asyncio.wait_for(client.announced_broadcast(PATH).available(), 10)
        return time.perf_counter() - start


async def main(sessions: int) -> dict:
    from harness import free_udp_port  # tests/harness.py

    state = Path(tempfile.mkdtemp(prefix="tatolab-bench-tokens-"))
    loop = asyncio.get_running_loop()
    bridge = Bridge(loop, loop, lambda *a, **k: None)
    keeper = Keeper(state)
    cert = certs.generate(state, ["localhost", "127.0.0.1"])
    outputs = {PATH: Output(Serve(PATH, "private", OutputRing("/unused")))}
    scopes = Scopes(outputs, lambda o: None)
    port = free_udp_port()
    listeners = Listeners(bridge, port, keeper, scopes, lambda: {PATH: "private"}, lambda grant: {})
    await listeners.start("loopback", "127.0.0.1", cert)
    checked = listeners.check
    unchecked = lambda kind, path, query: Grant(PATH, "private", None, keeper.kid, None)  # noqa: E731
    bare = f"https://127.0.0.1:{port}/{PATH}"
    token = keeper.owner_token(PATH)
    times: dict[str, list[float]] = {"with token": [], "without (unchecked)": []}
    for _ in range(3):  # warm up both paths
        await one(with_token(bare, token), cert.fingerprint)
    for _ in range(sessions):
        listeners.check = checked  # type: ignore[method-assign]
        times["with token"].append(await one(with_token(bare, token), cert.fingerprint))
        listeners.check = unchecked  # type: ignore[method-assign]
        times["without (unchecked)"].append(await one(bare, cert.fingerprint))
    check_us = []
    for _ in range(2000):
        start = time.perf_counter()
        keeper.check(token, PATH)
        check_us.append((time.perf_counter() - start) * 1e6)
    await listeners.stop_all()
    result = {name: {"median_ms": statistics.median(v) * 1000,
                     "p90_ms": statistics.quantiles(v, n=10)[-1] * 1000} for name, v in times.items()}
    result["check_alone_median_us"] = statistics.median(check_us)
    result["sessions"] = sessions
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=30)
    got = asyncio.run(main(parser.parse_args().sessions))
    for name in ("with token", "without (unchecked)"):
        print(f"{name:22} median {got[name]['median_ms']:.2f} ms  p90 {got[name]['p90_ms']:.2f} ms")
    print(f"the check alone: median {got['check_alone_median_us']:.1f} µs")
    print(json.dumps(got))
