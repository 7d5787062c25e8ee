"""The runtime's decisions, apart from its I/O: plain functions and values over plain data.

No process, socket or file is touched here, so every rule is tested in microseconds
(tests/test_rules.py and the rule tests beside it):

- ``crashes``  the two-crash rule and crash attribution
- ``exposure`` who may read an output; whether a remote link can be wired
- ``health``   the watchdog and memory verdicts, and what a node's state is called
- ``names``    who may take a stream's name
- ``saves``    which saved files count for `tatolab dev`
- ``reload``   which nodes a dev reload restarts, and which it provably keeps
"""
