"""A standalone MoQ relay, standing in for one on the internet: moq-rs's own server with one
origin that every session both publishes into and reads from (no tatolab code).

    python relay_standin.py PORT CERT KEY [TOKEN]

PORT 0: a free UDP port, the one "listening" names. Prints {"listening": addr, "fingerprint": hex} once it listens, then serves until killed. Given a
TOKEN, it refuses (as unauthorized, like moq-dev's relay) every session whose ?jwt= is not it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.parse

import moq


async def main(port: int, cert: str, key: str, token: str | None) -> None:
    origin = moq.OriginProducer()
    async with moq.Server(f"127.0.0.1:{port}", tls_cert=[cert], tls_key=[key], publish=origin,
                          subscribe=origin) as server:
        print(json.dumps({"listening": server.local_addr, "fingerprint": server.cert_fingerprints()[0]}), flush=True)
        if token is None:
            await server.serve()
            return
        held = set()
        async for request in server:
            given = urllib.parse.parse_qs(request.query or "").get("jwt", [None])[0]
            if given != token:
                await request.reject(401)
                continue
            session = await request.accept()
            held.add(session)  # held: dropping it would close it


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
