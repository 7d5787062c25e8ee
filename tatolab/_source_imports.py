"""A project's own modules are compiled from their source at every import, never read from a cached
``.pyc``.

`tatolab dev` reloads an edit the moment it is saved, and Python takes a cached ``.pyc`` as valid
when the source's modification time (in whole seconds) and size match what it recorded: an edit of
the same length, saved within the second the old version was cached (``1`` made ``2`` in a
config), would run the old code. So every folder of the project (not its ``.venv``: the
interpreter's own environment, whose packages stay cached) gets a finder whose source loader
asks for no file stats, which makes ``SourceLoader.get_code`` neither read nor write a ``.pyc``.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from typing import Any, Callable


class SourceOnlyLoader(SourceFileLoader):
    def path_stats(self, path: str) -> Any:
        raise OSError("a project's module is compiled from its source every time")


def _hook(roots: tuple[str, ...], skip: tuple[str, ...]) -> Callable[[str], FileFinder]:
    def finder_for(entry: str) -> FileFinder:
        real = os.path.realpath(entry or os.getcwd())
        if not (real + os.sep).startswith(roots) or (real + os.sep).startswith(skip):
            raise ImportError("not a project folder")  # the next hook (the usual FileFinder) takes it
        return FileFinder(entry, (ExtensionFileLoader, EXTENSION_SUFFIXES), (SourceOnlyLoader, SOURCE_SUFFIXES),
                          (SourcelessFileLoader, BYTECODE_SUFFIXES))

    return finder_for


def from_source(*folders: str) -> None:
    """Import every module under ``folders`` from its source from now on (the interpreter's own
    environment, ``sys.prefix``, excepted)."""
    roots = tuple(os.path.realpath(folder) + os.sep for folder in folders)
    skip = tuple({os.path.realpath(sys.prefix) + os.sep, os.path.realpath(sys.base_prefix) + os.sep})
    sys.path_hooks.insert(0, _hook(roots, skip))
    for entry in list(sys.path_importer_cache):  # found before: found again, through the hook
        if (os.path.realpath(entry or os.getcwd()) + os.sep).startswith(roots):
            del sys.path_importer_cache[entry]
