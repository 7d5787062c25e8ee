"""`trust`: the projects another user owns (or others may write to) that you trust to run as you."""

from __future__ import annotations

import os
from typing import TypedDict

from tatolab._control.errors import ControlError
from tatolab._runtime.processes import trust as rules
from tatolab._runtime.ops import op
from tatolab._runtime.runtime import Runtime


class Trusted(TypedDict):
    trusted: list[str]  # the list kept in the state folder, after this change
    changed: bool


@op("trust")
async def trust(runtime: Runtime, path: str | None = None, remove: bool = False) -> Trusted:
    """Trust the project folder ``path`` (and what is inside it) to run as you although another user
    owns it or others may write to it, as git's safe.directory (``*``: every project); ``remove``
    takes it off the list. Without ``path``: the list. Kept in the runtime's state folder."""
    entries = rules.read_trusted(runtime.kept.state)
    if path is None:
        return {"trusted": entries, "changed": False}
    if path != rules.EVERYWHERE and not os.path.isabs(path):
        raise ControlError(f"path {path!r} is not an absolute path; give the project folder's full path",
                           code="bad_value", details={"argument": "path"})
    entry = path if path == rules.EVERYWHERE else os.path.realpath(path)
    new = [e for e in entries if e != entry] if remove else entries + [entry]
    changed = list(dict.fromkeys(new)) != entries
    if changed:
        try:
            rules.write_trusted(new, runtime.kept.state)
        except OSError as exc:
            raise ControlError(f"the list of trusted projects could not be written ({exc.strerror or exc})") from None
    return {"trusted": list(dict.fromkeys(new)), "changed": changed}
