"""The shapes the runtime passes around, described once (issue 36, "one typed model").

``graph``: the compiled graph (what a stream function builds, what records keep) and the one
decode that validates it; ``view``: what the ``graph`` operation answers (docs/graph.md), whose
JSON Schema the MCP server gives agents. Both are TypedDicts: values stay plain dicts at run
time, msgspec checks them where they come in and describes them as JSON Schema.
"""
