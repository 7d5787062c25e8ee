"""Which live changes to a running graph are valid, and the graph after each (rules/changes.py, no runtime)."""

from __future__ import annotations

import copy

import pytest

from tatolab._control.errors import ControlError
from tatolab._control.words import render
from tatolab._runtime.rules import changes

GRAPH = {
    "stream": "counting",
    "nodes": [
        {"name": "counter", "class": "nodes.counter:Counter", "inputs": [], "outputs": [{"port": "counts"}]},
        {"name": "sink", "class": "nodes.sinks:OrderedSink",
         "inputs": [{"port": "rows", "delivery_profile": "ordered"}], "outputs": []},
    ],
    "links": [{"from": {"node": "counter", "port": "counts"}, "to": {"node": "sink", "port": "rows"}}],
    "exposures": [{"node": "counter", "port": "counts", "level": "private"}],
}
DOUBLER = {"name": "doubler", "class": "nodes.doubler:Doubler",
           "inputs": [{"port": "numbers", "delivery_profile": "ordered"}], "outputs": [{"port": "doubled"}]}


def refused(call, *args) -> str:
    with pytest.raises(ControlError) as caught:
        call(*args)
    return render(caught.value)


def test_a_node_is_added_unlinked_and_the_graph_given_is_left_as_it_was():
    before = copy.deepcopy(GRAPH)
    graph = changes.add_node("counting", GRAPH, DOUBLER)
    assert [n["name"] for n in graph["nodes"]] == ["counter", "sink", "doubler"]
    assert graph["links"] == GRAPH["links"]
    assert GRAPH == before


def test_a_taken_or_unsafe_name_is_refused_with_the_call_that_works():
    taken = refused(changes.add_node, "counting", GRAPH, dict(DOUBLER, name="sink"))
    assert taken.startswith("stream counting already has a node named sink (nodes.sinks:OrderedSink)")
    assert taken.endswith("give the new one another name; or remove that one first with `tatolab node rm counting sink`")
    unsafe = refused(changes.checked_name, "counting", GRAPH, "My Probe", "TestPatternSource")
    assert unsafe == ("node name 'My Probe' is not URL-safe (it is part of every address of the node); add it as "
                      "my-probe with `tatolab node add counting my-probe TestPatternSource`")
    empty = refused(changes.checked_name, "counting", GRAPH, "", "TestPatternSource")
    assert empty.startswith("cannot add node '' to stream counting: the name '' has nothing left once made URL-safe")


def test_connect_links_an_output_of_the_stream_by_node_port_or_by_its_own_address():
    graph = changes.add_node("counting", GRAPH, DOUBLER)
    for output in ("counter/counts", "counting/counter/counts", "vm/counting/counter/counts"):
        linked, link = changes.connect("counting", graph, output, "doubler/numbers", "vm")
        assert link.entry == {"from": {"node": "counter", "port": "counts"}, "to": {"node": "doubler", "port": "numbers"}}
        assert linked["links"][-1] == link.entry and len(graph["links"]) == 1


def test_another_streams_output_is_a_remote_link_by_address():
    graph = changes.add_node("counting", GRAPH, DOUBLER)
    _, link = changes.connect("counting", graph, "clock/ticker/ticks", "counting/doubler/numbers", "vm")
    assert link.remote and link.entry["from"] == {"address": "clock/ticker/ticks"}
    _, elsewhere = changes.connect("counting", graph, "cam-box/counting/counter/counts", "doubler/numbers", "vm")
    assert elsewhere.entry["from"] == {"address": "cam-box/counting/counter/counts"}  # another machine's


def test_a_port_that_is_not_there_is_named_with_the_ports_that_are():
    graph = changes.add_node("counting", GRAPH, DOUBLER)
    missing = refused(changes.connect, "counting", graph, "counter/nope", "doubler/numbers", "vm")
    assert missing == ("node counter (nodes.counter:Counter) of stream counting has no output named nope; "
                       "its inputs: none; its outputs: counts")
    swapped = refused(changes.connect, "counting", graph, "doubler/numbers", "counter/counts", "vm")
    assert swapped == ("numbers of node doubler (nodes.doubler:Doubler) of stream counting is an input, not an "
                       "output; a link goes from an output to an input")
    no_node = refused(changes.connect, "counting", graph, "counter/counts", "probe/numbers", "vm")
    assert no_node == "stream counting has no node probe; its nodes: counter, doubler, sink"
    other = refused(changes.connect, "counting", graph, "counter/counts", "clock/ticker/in", "vm")
    assert other.startswith("clock/ticker/in is an input of stream clock, not of counting")


def test_a_second_link_from_the_same_output_into_an_input_is_refused_and_a_fan_in_is_not():
    graph, _ = changes.connect("counting", changes.add_node("counting", GRAPH, DOUBLER),
                               "counter/counts", "doubler/numbers", "vm")
    again = refused(changes.connect, "counting", graph, "counter/counts", "doubler/numbers", "vm")
    assert again == ("stream counting: counter/counts is already connected to doubler/numbers; an output writes "
                     "to an input through one link; remove that link with "
                     "`tatolab link rm counter/counts counting/doubler/numbers`")
    # many links may enter one input (the docs' fan-in): another output is a second link, not a second writer
    fanned, _ = changes.connect("counting", graph, "clock/ticker/ticks", "doubler/numbers", "vm")
    assert len([link for link in fanned["links"] if link["to"]["node"] == "doubler"]) == 2


def test_removing_a_node_takes_its_links_and_exposures_with_it():
    graph, gone = changes.remove_node("counting", GRAPH, "counter")
    assert [n["name"] for n in graph["nodes"]] == ["sink"]
    assert graph["links"] == [] and graph["exposures"] == []
    assert [(link.source, link.target) for link in gone] == [("counter/counts", "sink/rows")]
    assert refused(changes.remove_node, "counting", GRAPH, "probe") == \
        "stream counting has no node probe; its nodes: counter, sink"


def test_disconnect_removes_one_link_or_says_what_the_input_reads():
    graph, link = changes.disconnect("counting", GRAPH, "counter/counts", "sink/rows", "vm")
    assert graph["links"] == [] and link.target == "sink/rows"
    assert refused(changes.disconnect, "counting", graph, "counter/counts", "sink/rows", "vm") == \
        "stream counting has no link from counter/counts to sink/rows; what sink/rows reads: none"
