"""The compiled graph's types, as the runtime imports them: described once, in tatolab/_model/graph.py."""

from __future__ import annotations

from tatolab._model.graph import Exposure, Graph, InputPort, Link, LinkEnd, Node, OutputPort

__all__ = ["Exposure", "Graph", "InputPort", "Link", "LinkEnd", "Node", "OutputPort"]
