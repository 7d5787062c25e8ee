"""Testing a project's nodes and streams: ``run_node`` and ``FakeContext`` run a node in the test's
own process (no runtime), ``run_with_recording`` a stream in the runtime with a recording in place
of a source. The same names as ``tatolab.stream`` gives them (README: "Testing a node")."""

from tatolab.stream import FakeContext, run_node, run_with_recording

__all__ = ["FakeContext", "run_node", "run_with_recording"]
