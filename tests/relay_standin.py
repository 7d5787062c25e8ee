"""A standalone MoQ relay, standing in for one on the internet: moq-rs's own server with one
origin that every session both publishes into and reads from (no tatolab code).

    python relay_standin.py PORT CERT KEY

Prints {"listening": addr, "fingerprint": hex} once it listens, then serves until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys

import moq


async def main(port: int, cert: str, key: str) -> None:
    origin = moq.OriginProducer()
    async with moq.Server(f"127.0.0.1:{port}", tls_cert=[cert], tls_key=[key], publish=origin,
                          subscribe=origin) as server:
        print(json.dumps({"listening": server.local_addr, "fingerprint": server.cert_fingerprints()[0]}), flush=True)
        await server.serve()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
