"""`tatolab relay`: publish this machine's public outputs into a MoQ relay on the internet."""

from __future__ import annotations

from typing import TypedDict

from tatolab._control.errors import ControlError
from tatolab._runtime.ops import op
from tatolab._runtime.relay import upstream
from tatolab._runtime.relay.relay import Relay
from tatolab._runtime.relay.tokens import redact, with_token
from tatolab._runtime.runtime import Runtime


class RelayState(TypedDict):
    url: str | None  # the joined relay, None when none
    state: str  # connected, connecting..., cannot reach... (with why), not joined


def served_relay(runtime: Runtime) -> Relay:
    """The relay this runtime serves, or the refusal saying it serves none (`url`, `token`, `relay`)."""
    if runtime.relay is None:
        raise ControlError("this runtime serves no MoQ relay")
    return runtime.relay


def _state(runtime: Runtime) -> RelayState:
    relay = served_relay(runtime)
    return {"url": redact(relay.upstream) if relay.upstream else None, "state": relay.upstream_state if relay.upstream else "not joined"}


@op("relay_join")
async def relay_join(runtime: Runtime, url: str, token: str | None = None) -> RelayState:
    """Publish this machine's public outputs into the MoQ relay at ``url`` (its own access rules
    decide who reads), sending ``token`` (a JWT, moq-dev's format; or ``?jwt=`` in the URL) to it;
    recorded, so it holds across restarts. A relay that refuses the token is reported as refused."""
    relay = served_relay(runtime)
    try:
        url = upstream.check(with_token(url, token) if token else url)
    except upstream.BadRelayUrl as exc:
        raise ControlError(str(exc), code="bad_value", details={"argument": "url"}) from None
    upstream.save(relay.state, url)
    relay.join(url)
    return _state(runtime)


@op("relay_leave")
async def relay_leave(runtime: Runtime) -> RelayState:
    """Stop publishing into the joined relay, and forget it."""
    relay = served_relay(runtime)
    upstream.save(relay.state, None)
    relay.join(None)
    return _state(runtime)


@op("relay_status")
async def relay_status(runtime: Runtime) -> RelayState:
    """The joined relay, if any, and whether this machine is connected to it."""
    return _state(runtime)
