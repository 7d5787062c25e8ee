"""The relay's plan: what changes when the set of exposed outputs changes, without a network."""

from tatolab._runtime.relay.plan import Served, Target, plan

RING, OTHER = object(), object()


def test_nothing_exposed_listens_nowhere():
    steps = plan(frozenset(), {}, {}, public_hosts=True)
    assert (steps.open, steps.close, steps.drop, steps.add, steps.refeed) == ([], [], {}, {}, set())


def test_a_first_private_output_opens_loopback_only_and_starts_its_feeder():
    steps = plan(frozenset(), {}, {"m/s/n/p": Target("private", RING)}, public_hosts=True)
    assert steps.open == ["loopback"]
    assert steps.add == {"m/s/n/p": ("loopback",)}
    assert steps.refeed == {"m/s/n/p"}


def test_a_public_output_opens_the_public_listener_only_where_the_machine_has_an_address():
    wanted = {"m/s/n/p": Target("public", RING)}
    assert plan(frozenset(), {}, wanted, public_hosts=True).open == ["loopback", "public"]
    without = plan(frozenset(), {}, wanted, public_hosts=False)
    assert without.open == ["loopback"]
    assert without.add == {"m/s/n/p": ("loopback", "public")}  # a joined relay reads the public origin


def test_the_last_output_unexposed_closes_every_listener_and_cuts_its_readers():
    served = {"m/s/n/p": Served(RING, frozenset({"loopback", "public"}))}
    steps = plan(frozenset({"loopback", "public"}), served, {}, public_hosts=True)
    assert steps.close == ["loopback", "public"]
    assert steps.drop == {"m/s/n/p": ("loopback", "public")}
    assert steps.why == {"m/s/n/p": "no longer exposed"}
    assert steps.cuts("loopback", "m/s/n/p") and steps.cuts("public", "m/s/n/p")
    assert steps.gone("m/s/n/p", served)


def test_public_to_private_drops_only_the_public_broadcast_and_cuts_only_its_readers():
    served = {"m/s/n/p": Served(RING, frozenset({"loopback", "public"})),
              "m/s/n/q": Served(RING, frozenset({"loopback"}))}
    wanted = {"m/s/n/p": Target("private", RING), "m/s/n/q": Target("private", RING)}
    steps = plan(frozenset({"loopback", "public"}), served, wanted, public_hosts=True)
    assert steps.close == ["public"]
    assert steps.drop == {"m/s/n/p": ("public",)}
    assert steps.why["m/s/n/p"] == "now private"
    assert not steps.cuts("loopback", "m/s/n/p")
    assert steps.cuts("public", "m/s/n/p")
    assert not steps.gone("m/s/n/p", served)
    assert steps.add == {} and steps.refeed == set()  # the private readers keep reading


def test_private_to_public_adds_the_public_broadcast_and_restarts_the_feeder():
    served = {"m/s/n/p": Served(RING, frozenset({"loopback"}))}
    steps = plan(frozenset({"loopback"}), served, {"m/s/n/p": Target("public", RING)}, public_hosts=True)
    assert steps.open == ["public"]
    assert steps.add == {"m/s/n/p": ("public",)}
    assert steps.refeed == {"m/s/n/p"}  # the feeder then waits for the new track's subscribers too
    assert steps.drop == {}


def test_a_stream_loaded_again_restarts_the_feeder_on_its_new_ring_without_cutting_readers():
    served = {"m/s/n/p": Served(RING, frozenset({"loopback"}))}
    steps = plan(frozenset({"loopback"}), served, {"m/s/n/p": Target("private", OTHER)}, public_hosts=True)
    assert steps.refeed == {"m/s/n/p"}
    assert steps.add == {} and steps.drop == {}
    assert not steps.cuts("loopback", "m/s/n/p")


def test_an_unchanged_wanted_set_changes_nothing():
    served = {"m/s/n/p": Served(RING, frozenset({"loopback", "public"}))}
    steps = plan(frozenset({"loopback", "public"}), served, {"m/s/n/p": Target("public", RING)}, public_hosts=True)
    assert (steps.open, steps.close, steps.drop, steps.add, steps.refeed) == ([], [], {}, {}, set())
