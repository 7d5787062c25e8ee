"""The compiled part: the links' hot paths in C (tatolab/_links/_native.c, with the ring's
seqlock in tatolab/_links/ring_protocol.h).

Everything else is in pyproject.toml. The extension is optional on x86-64: without a C
compiler, or on Python 3.10, the install goes on and the ring (tatolab/_links/ring/) publishes
and reads in Python (slower, same bytes). On a machine without total store order (arm64) the
links refuse to run without it (tatolab/_links/futex.py says so).
"""

import sys

from setuptools import Extension, setup

limited = sys.version_info >= (3, 11) and sys.implementation.name == "cpython"
setup(
    ext_modules=[
        Extension(
            "tatolab._links._native",
            ["tatolab/_links/_native.c"],
            depends=["tatolab/_links/ring_protocol.h", "tatolab/_links/_latency.h", "tatolab/_links/_timing.h",
                     "tatolab/_links/_ordered.h"],  # included by _native.c (and so shipped in the sdist)
            py_limited_api=True,
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
    if limited
    else [],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if limited else {},
)
