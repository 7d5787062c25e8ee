"""Prompts: a few tasks an agent is often asked, each as the tool calls that do it, in order."""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types as types

from tatolab._mcp.resources import CATALOG_URI, GRAPH_TEMPLATE


@dataclass(frozen=True)
class Prompt:
    name: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...]  # (name, description, required)
    steps: str  # the text, with {argument} fields

    def listed(self) -> types.Prompt:
        return types.Prompt(name=self.name, description=self.description, arguments=[
            types.PromptArgument(name=name, description=about, required=required)
            for name, about, required in self.arguments])

    def text(self, arguments: dict[str, str]) -> str:
        given = {name: arguments.get(name) or f"<{name}>" for name, _, _ in self.arguments}
        return self.steps.format(**given)


PROMPTS: tuple[Prompt, ...] = (
    Prompt(
        "inspect_stream", "Look over one running stream: its nodes, what flows where, and what went wrong.",
        (("stream", "the stream's name (`list_streams` lists them)", True),),
        """Inspect the tatolab stream {stream} with these tool calls, in order, and report what you find:
1. `graph(stream="{stream}")`: each node's state, pid, restarts and last_error; each link's written, read and dropped.
2. For each output in the graph, `tap(address="{stream}/<node>/<port>", count=3)`: what its bags hold \
(for a video output, `exchange(address="{stream}/<node>/<port>")` shows the frame itself).
3. `logs(stream="{stream}", level="warning", tail=50)`: the warnings and errors its nodes logged.
4. Sum up: which nodes run, what each output carries, and anything wrong (a node restarting or hung, \
an output that writes nothing, errors in the logs), naming the node and port."""),
    Prompt(
        "find_dropped_bags", "Find where a stream drops bags, and why.",
        (("stream", "the stream's name", True),),
        """Find where the tatolab stream {stream} drops bags:
1. `graph(stream="{stream}")`. In `links`, a link whose `dropped` grows loses bags: a reader on the \
`newest` profile skips what it could not read in time (by design), an `ordered` reader only when lapped. \
Each node's `inputs` entry has its own `read`, `dropped` and `bad` (undecodable bags).
2. Call `graph(stream="{stream}")` again a few seconds later and compare `written`, `read` and `dropped` per \
link: the link whose dropped grows is the one.
3. For that link's reading node: is it `hung`, is its `busy_ms` high, its `cpu_percent` near 100? \
`logs(stream="{stream}", node="<reader>", tail=50)` shows what it says.
4. `tap(address="<the writing output>", count=5)` shows the bags and their timing (`ts_ns`).
5. Say which link drops, how many a second, and the likely cause (a slow reader, a bad bag, a reader that \
restarts), and what would fix it."""),
    Prompt(
        "add_node_and_wire", "Add a node to a running stream and wire it in, without restarting the others.",
        (("stream", "the stream's name", True),
         ("node", "what to add: a built-in's name, or module:Class from the stream's project", True),
         ("from_output", "the output the new node reads: <node>/<port> in the stream, or <stream>/<node>/<port> "
                         "in another (optional)", False)),
        f"""Add {{node}} to the running tatolab stream {{stream}} and wire it in:
1. Read the resource `{CATALOG_URI}`: find {{node}} there (a built-in with its config schema and ports, or a \
Python node the streams use, with its docstring) and pick its config.
2. `graph(stream="{{stream}}")`: the nodes and ports there now (and each node's pid, to check later that \
they did not restart).
3. `add_node(stream="{{stream}}", name="<a new node name>", node_class="{{node}}", config={{{{...}}}})`: it \
answers once the node runs, with its `pid` and `state` (ready, or waiting for bags on its inputs); a node \
that fails to start is removed again and the error gives its log's error.
4. `connect(stream="{{stream}}", output="{{from_output}}", input="<new node>/<its input port>")`, and from \
its output on to where it should go. A link from another stream's output that is not exposed waits: the \
answer says why, and `fix_calls` the call that exposes it.
5. `tap(address="{{stream}}/<new node>/<its output>", count=3)` to see its bags; \
`graph(stream="{{stream}}")` (or the resource `{GRAPH_TEMPLATE}`) to check it runs and the other nodes' \
pids are unchanged. A kept stream changed this way says so in `graph`; after a runtime restart it \
comes back as recorded."""),
)

BY_NAME = {prompt.name: prompt for prompt in PROMPTS}
