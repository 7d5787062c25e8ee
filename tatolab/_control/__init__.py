"""The control plane: what the CLI and an MCP server both stand on.

``paths`` (where the socket, state and shared memory live), ``protocol`` (JSON lines on the
socket), ``errors`` (a refusal as a code, a message and the fixes as operations),
``operations`` (how an operation describes itself: doc, typed arguments, typed result) and
``client`` (a blocking and an async client). The runtime implements the operations
(tatolab/_runtime/ops/); nothing here imports the runtime.
"""
