"""The ``tatolabd`` command: checks that the runtime's own dependencies are installed first.

A project's ``.venv`` holds only ``tatolab``; the runtime needs ``tatolab[runtime]``.
"""

from __future__ import annotations

import importlib.util
import sys

# numpy, moderngl and av: built-in video nodes; soxr, sounddevice (and av): built-in audio nodes;
# moq (moq-rs), cryptography: the MoQ relay and its certificate
RUNTIME_DEPENDENCIES = ("psutil", "watchfiles", "numpy", "moderngl", "av", "soxr", "sounddevice", "moq", "cryptography")


def missing_dependencies() -> list[str]:
    return [name for name in RUNTIME_DEPENDENCIES if importlib.util.find_spec(name) is None]


def main() -> None:
    missing = missing_dependencies()
    if missing:
        print(
            f"error: tatolabd needs {', '.join(missing)}, which come with the runtime's install; "
            f"{sys.prefix} holds the SDK only. Install the runtime from a clone of Tatolab (the package "
            "index's tatolab is an unrelated placeholder): `uv tool install '/path/to/tatolab[runtime]'` "
            f"or `pipx install '/path/to/tatolab[runtime]'` puts tatolabd and tatolab on PATH, or "
            f"`{sys.executable} -m pip install '/path/to/tatolab[runtime]'` adds it here",
            file=sys.stderr,
        )
        sys.exit(1)
    from tatolab._runtime.daemon import main as run_daemon

    run_daemon()
