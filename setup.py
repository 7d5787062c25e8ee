"""The one compiled part: the ring writer's publish (tatolab/_links/_native.c).

Everything else is in pyproject.toml. The extension is optional: without a C compiler, or
on Python 3.10, the install goes on and the ring (tatolab/_links/ring/writer.py) publishes in Python (slower, same bytes).
"""

import sys

from setuptools import Extension, setup

limited = sys.version_info >= (3, 11) and sys.implementation.name == "cpython"
setup(
    ext_modules=[
        Extension(
            "tatolab._links._native",
            ["tatolab/_links/_native.c"],
            depends=["tatolab/_links/_latency.h"],  # included by _native.c (and so shipped in the sdist)
            py_limited_api=True,
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
    if limited
    else [],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if limited else {},
)
