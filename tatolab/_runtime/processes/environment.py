"""The environment a stream's processes get: the command's that loaded it, less the runtime's own.

`tatolab run`, `run -d` and `dev` send the command's environment with the load request, so
`CAMERA=/dev/video2 tatolab run` reaches the stream function and every node. A kept stream
records it at `run -d` and gets it back after every restart. What never reaches a stream:
``TATOLAB_*`` variables (the runtime's machine lock, log limits, and the node host's own
``TATOLAB_LOG_FD``/``TATOLAB_PARENT_PID``, which the runtime sets per node) and
``PYTHONHOME``/``VIRTUAL_ENV``/``__PYVENV_LAUNCHER__`` (they would point the project's Python
at another environment). The runtime's own environment (what `tatolabd` or systemd started
with) is used only for a kept stream recorded before environments were recorded.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

RUNTIME_PREFIX = "TATOLAB_"
TRUST = "TATOLAB_TRUST"
_OTHER_PYTHON = ("PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")


def command_env(value: Any) -> dict[str, str] | None:
    """The environment a load request carries, without the runtime's variables; None when it has none.

    Raises ValueError naming what is wrong when ``value`` is not an environment.
    """
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError("env must be an object mapping variable names to text")
    for key, text in value.items():
        if not key or "=" in key or "\0" in key or "\0" in text:
            raise ValueError(f"env holds {key!r}, which cannot be an environment variable")
    # TATOLAB_TRUST stays: the runtime honours it for this load (and a kept stream's restarts,
    # trust.py); stream_env still keeps it from every process of the stream
    return {k: v for k, v in value.items() if not k.startswith(RUNTIME_PREFIX) or k == TRUST}


def stream_env(command: Mapping[str, str] | None) -> dict[str, str]:
    """The environment for a stream's compile or node process, from the command's environment."""
    base = os.environ if command is None else command
    env = {k: v for k, v in base.items() if not k.startswith(RUNTIME_PREFIX) and k not in _OTHER_PYTHON}
    env["PYTHONUNBUFFERED"] = "1"
    return env
