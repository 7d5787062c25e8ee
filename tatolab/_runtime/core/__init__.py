"""The runtime's core: the stream lifecycle (streams.py) and the warm interpreters' bookkeeping
(warm.py) as synchronous state, apart from I/O.

It takes commands (a load, a stop, a start failed...) with the facts the drivers read and the
time, and returns effects (stop that version, write this record, start those nodes...) that
``runtime.py`` carries out with processes, storage and the relay, as aioquic keeps a QUIC
connection's state apart from its sockets. It imports no asyncio, os or subprocess
(tests/test_layers.py holds it to that), so a lifecycle test is a list of commands.
"""
