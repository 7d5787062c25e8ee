"""What one token's sessions see: a moq origin of their own holding only the outputs the token
may read (at or under its path, and public ones only for a public token), so a session's
announcements list nothing else and a subscription to anything else finds nothing.

One view per distinct (scope, public only), shared by every session with that grant, made at the
first session's accept and ended with the last one. Each output in it is a broadcast of its own
(``Output.publish`` under the view's key), fed by the output's one feeder like any other track.

Ownership: relay thread only (``Serving`` holds the one ``Scopes``; the accept loop calls it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tatolab._runtime.relay.feed import Output


@dataclass
class View:
    key: str  # the broadcasts' key in each Output ("view public|any <scope>")
    scope: str
    public_only: bool
    origin: Any  # moq.OriginProducer
    sessions: int = 0
    paths: set[str] = field(default_factory=set)


class Scopes:
    def __init__(self, outputs: dict[str, Output], init: Callable[[Output], bytes | None]) -> None:
        self.outputs = outputs  # the relay's outputs (the same dict Serving keeps)
        self.init = init  # an output's H.264 parameter sets, if it has a video track (cached by Serving)
        self.views: dict[str, View] = {}

    def acquire(self, scope: str, public_only: bool) -> View:
        """The view for this grant, made now if no session holds it; one more session holds it."""
        import moq

        key = f"view {'public' if public_only else 'any'} {scope}"
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = View(key, scope, public_only, moq.OriginProducer())
            self._fill(view)
        view.sessions += 1
        return view

    def release(self, view: View) -> None:
        view.sessions -= 1
        if view.sessions <= 0 and self.views.get(view.key) is view:
            del self.views[view.key]
            for path in view.paths:
                output = self.outputs.get(path)
                if output is not None:
                    output.unpublish(view.key)

    def refresh(self) -> None:
        """Bring every view in step with the outputs (after each sync)."""
        for view in self.views.values():
            self._fill(view)

    def readable(self, view: View, output: Output) -> bool:
        path = output.serve.path
        in_scope = not view.scope or path == view.scope or path.startswith(view.scope + "/")
        return in_scope and (not view.public_only or output.serve.public)

    def _fill(self, view: View) -> None:
        for path in list(view.paths):
            output = self.outputs.get(path)
            if output is None or not self.readable(view, output):
                view.paths.discard(path)
                if output is not None:
                    output.unpublish(view.key)
        for path, output in self.outputs.items():
            if path not in view.paths and self.readable(view, output):
                output.publish(view.key, view.origin, self.init(output))
                view.paths.add(path)
