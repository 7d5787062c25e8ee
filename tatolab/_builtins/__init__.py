"""Built-in nodes' code: shipped with the runtime's install and run by the runtime's own
interpreter, one process per node like any other (their descriptions: ``tatolab._sdk.builtins``)."""
