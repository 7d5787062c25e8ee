"""Errors a user sees. Each message says what happened, to which stream/node/port, and the fix."""

from __future__ import annotations


class TatolabError(Exception):
    """Base of every error Tatolab raises on purpose."""


class NodeDefinitionError(TatolabError):
    """A ``@node`` class declares something Tatolab cannot run."""


class GraphError(TatolabError):
    """A stream function built a graph that cannot run: unknown port, duplicate name, bad link."""


class ConfigError(TatolabError):
    """A config given to ``add()`` does not fit the node's config type."""


class BagError(TatolabError):
    """A bag cannot be written or does not fit the type it is read into."""


class AddressError(TatolabError):
    """A name or an address cannot be made URL-safe or does not have the address form."""


class ProjectError(TatolabError):
    """A project cannot be loaded: no ``@stream``, several without a target, a failing import."""


class CannotRun(TatolabError):
    """Raised by a node (in ``setup()``, or on a thread of its own) when its configuration can never
    work: a file that is not what it must be, a setting out of range. The node ends once, with this
    message as its one line, and stays ``failed`` (in ``graph`` and ``streams``) until its stream is
    changed or started again: restarting it could only fail the same way."""
