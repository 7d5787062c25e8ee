"""A node whose configuration can never work: the one line it ends with.

A node raises ``CannotRun`` (tatolab.stream) in ``setup()``, or a built-in's own thread ends with
it (tatolab/_builtins/ending.py); the host says this line once, with no traceback, and exits with
``EXIT_CANNOT_RUN``; the supervisor then marks the node failed rather than restarting it.
"""

from __future__ import annotations


def cannot_run_line(node: str, exc: BaseException) -> str:
    reason = str(exc).strip() or type(exc).__name__
    return (f"node {node} cannot run: {reason}. It stays failed until its stream is changed "
            "or started again")
