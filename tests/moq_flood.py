"""A bounded loop of MoQ sessions without a token, each with a path of its own (900 characters),
as a flood from the network is: ``python moq_flood.py FINGERPRINT ROOT_URL N``. Prints one JSON
line: {"refused": n, "other": [outcomes that were not a refusal]}. Loopback only (tests)."""

from __future__ import annotations

import asyncio
import json
import sys

import moq
import moq.errors


async def one(url: str, fingerprint: str) -> str:
    try:
        async with moq.Client(url, tls_fingerprints=[fingerprint], websocket_enabled=False, reconnect=False) as client:
            try:
                await asyncio.wait_for(client.session.closed(), 10)
            except asyncio.TimeoutError:
                return "accepted"
            return "closed"
    except moq.Error as exc:
        return "refused" if moq.errors.is_auth(exc) else f"error: {str(exc)[:100]}"


async def main(fingerprint: str, root: str, n: int) -> None:
    outcomes = []
    for i in range(n):
        path = f"flood{i:06d}-" + "x" * 888  # 900 characters, each its own
        outcomes.append(await one(f"{root.rstrip('/')}/{path}", fingerprint))
    print(json.dumps({"refused": outcomes.count("refused"), "other": [o for o in outcomes if o != "refused"][:5]}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
