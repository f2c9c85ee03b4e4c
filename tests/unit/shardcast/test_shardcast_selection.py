"""Source choice: weights from success × throughput, back-off, demotion, exploration; near sources by round
trip; the ordered policy; the policy a config names."""

from __future__ import annotations

import random

import pytest
from config_unions import member_id, sample_of, union_members

from swarmrl.configs.shardcast import ClientConfig, OrderedSelection, SourceSelection, WeightedSelection
from swarmrl.shardcast.selection import OrderedPolicy, WeightedPolicy, source_policy
from swarmrl.shardcast.selection.base import DEFAULT_THROUGHPUT, ROUND_TRIP_WINDOW
from swarmrl.shardcast.selection.weighted import CORRUPTION_PENALTY


def selector(urls=("a", "b"), exploration=0.0, seed=0) -> WeightedPolicy:
    return WeightedPolicy(list(urls), exploration, 0.25, 10.0, random.Random(seed))


def test_unmeasured_sources_share_the_prior():
    s = selector()
    assert s.weight("a") == s.weight("b") == pytest.approx(0.5 * DEFAULT_THROUGHPUT)


def test_weight_is_beta_smoothed_success_times_ewma_throughput():
    s = selector()
    s.record_success("a", 100, 1.0)  # 100 B/s
    s.record_success("a", 400, 1.0)  # EWMA: 0.3*400 + 0.7*100 = 190
    s.record_failure("a", now=0.0)
    # success rate (2 + 1) / (2 + 1 + 2) = 0.6
    assert s.weight("a") == pytest.approx(0.6 * 190)
    # b is unmeasured: it borrows the best measured throughput (190) with prior success 1/2
    assert s.weight("b") == pytest.approx(0.5 * 190)


def test_backoff_doubles_and_is_capped():
    s = selector()
    for expected in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0):
        s.record_failure("a", now=100.0)
        assert s.stats["a"].backoff_until == pytest.approx(100.0 + expected)
    s.record_success("a", 1, 1.0)
    assert s.stats["a"].backoff_until == 0.0


def test_a_source_back_from_being_unreachable_ends_its_back_off_when_it_answers():
    s = selector()
    for _ in range(7):  # a relay down for a while: its back-off reached the cap
        s.record_failure("a", now=100.0, unreachable=True)
    assert not s.ready("a", 105.0)
    s.record_reachable("a")  # restarted: it answers again
    assert s.ready("a", 100.0)
    s.record_failure("a", now=200.0, unreachable=True)
    assert s.stats["a"].backoff_until == pytest.approx(200.25)  # counted afresh


def test_a_slow_or_lying_source_keeps_its_back_off_when_it_answers():
    s = selector()
    s.record_slow("a", 1000, 4.0, now=100.0)
    s.record_reachable("a")  # answering a small request costs a trickling source nothing
    assert not s.ready("a", 100.1)
    s.record_corrupt("b", now=100.0)
    s.record_reachable("b")
    assert not s.ready("b", 100.1)


def test_backing_off_sources_are_not_chosen():
    s = selector()
    s.record_failure("a", now=0.0)
    assert all(s.choose(["a", "b"], now=0.1) == "b" for _ in range(50))
    assert s.choose(["a"], now=0.1) is None
    assert s.choose(["a"], now=0.3) == "a"
    assert s.earliest_ready(["a"]) == pytest.approx(0.25)


def test_corruption_demotes_by_the_penalty():
    s = selector()
    before = s.weight("a")
    s.record_corrupt("a", now=0.0)
    # one failure: success (0+1)/(1+2) = 1/3 instead of 1/2, then divided by the penalty
    assert s.weight("a") == pytest.approx(before * (1 / 3) / 0.5 / CORRUPTION_PENALTY)
    assert s.stats["a"].corrupt == 1


def test_sampling_follows_weights():
    s = selector(seed=1)
    s.record_success("a", 900, 1.0)
    s.record_success("b", 100, 1.0)
    picks = [s.choose(["a", "b"], now=0.0) for _ in range(4000)]
    assert 0.85 < picks.count("a") / len(picks) < 0.95  # 900 : 100 with equal success rates


def test_exploration_gives_a_demoted_source_a_chance():
    s = selector(exploration=0.2, seed=2)
    s.record_corrupt("b", now=-100.0)
    picks = [s.choose(["a", "b"], now=0.0) for _ in range(2000)]
    assert 0.05 < picks.count("b") / len(picks) < 0.15  # ≈ 0.2 × 1/2 from exploration alone


def test_a_request_cut_below_the_floor_counts_as_failure_and_as_its_rate():
    s = selector()
    s.record_success("a", 1000, 1.0)  # 1000 B/s
    s.record_slow("a", 10, 1.0, now=0.0)  # 10 B/s: EWMA 0.3*10 + 0.7*1000 = 703
    assert s.throughput("a") == pytest.approx(703)
    assert s.stats["a"].failures == 1 and s.stats["a"].backoff_until == pytest.approx(0.25)
    assert not s.ready("a", 0.1) and s.ready("a", 0.3)


def test_sources_measured_at_zero_can_still_be_sampled():
    s = selector(exploration=0.0)
    s.observe_rate("a", 0, 1.0)
    s.observe_rate("b", 0, 1.0)
    assert {s.choose(["a", "b"], now=0.0) for _ in range(50)} == {"a", "b"}  # each is drawn


def test_weighted_ranking_puts_the_heaviest_first():
    s = selector(urls=("a", "b", "c"))
    s.record_success("b", 900, 1.0)
    s.record_success("c", 100, 1.0)
    s.record_corrupt("a", now=-100.0)
    assert s.ranked(["a", "b", "c"]) == ["b", "c", "a"]


def test_near_sources_are_those_within_twice_the_shortest_round_trip_plus_the_slack():
    s = selector(urls=("us", "eu", "asia", "local", "silent"))
    for url, seconds in [("us", 0.300), ("eu", 0.100), ("asia", 0.002), ("local", 0.030)]:
        s.observe_round_trip(url, seconds)
    # limit: 2 × 2 ms + 50 ms = 54 ms; a source that never answered is not near
    assert s.near(["us", "eu", "asia", "local", "silent"]) == ["asia", "local"]
    assert s.near(["us", "eu"]) == ["eu"]  # among these two: limit 250 ms


def test_small_requests_go_to_near_sources_first():
    s = selector(urls=("far", "near"))
    s.record_success("far", 10_000_000, 1.0)  # the heavier by throughput
    s.observe_round_trip("far", 0.25)
    s.observe_round_trip("near", 0.002)
    assert s.ranked(["far", "near"]) == ["far", "near"]
    assert s.ranked_near_first(["far", "near"]) == ["near", "far"]


def test_without_measured_round_trips_every_source_is_near():
    s = selector(urls=("a", "b"))
    assert s.near(["a", "b"]) == ["a", "b"]


def test_the_round_trip_is_the_shortest_of_the_last_answers():
    s = selector(urls=("a",))
    s.observe_round_trip("a", 0.5)  # a new connection's handshake included
    s.observe_round_trip("a", 0.1)
    s.observe_round_trip("a", 0.3)
    assert s.stats["a"].round_trip == 0.1
    for _ in range(ROUND_TRIP_WINDOW - 1):
        s.observe_round_trip("a", 0.2)
    assert s.stats["a"].round_trip == 0.2  # the 0.1 s answer has left the window: a path can lengthen


def test_a_slow_answer_of_the_local_relay_does_not_make_a_distant_one_near():
    """An eu node: its relay 2 ms away answers in 150 ms while it mirrors a version on a busy machine; the us
    relay is 100 ms away. The us relay must stay far, or the node sends its shards across the narrow link."""
    s = selector(urls=("eu-relay", "us-relay"))
    for seconds in (0.004, 0.002, 0.150, 0.120):
        s.observe_round_trip("eu-relay", seconds)
    for seconds in (0.200, 0.101, 0.104):  # the first with its connection's handshake
        s.observe_round_trip("us-relay", seconds)
    assert s.near(["eu-relay", "us-relay"]) == ["eu-relay"]


def test_the_ordered_policy_asks_in_the_given_order_and_puts_a_corrupt_source_last():
    s = OrderedPolicy(["near", "mid", "far"], 0.25, 10.0)
    s.record_success("far", 10**9, 1.0)  # the fastest source does not jump the queue
    assert all(s.choose(["near", "mid", "far"], now=0.0) == "near" for _ in range(20))
    s.record_failure("near", now=0.0)
    assert s.choose(["near", "mid", "far"], now=0.1) == "mid"  # near backs off
    assert s.choose(["near", "mid", "far"], now=0.3) == "near"  # and is first again once ready
    s.record_corrupt("near", now=-100.0)
    assert s.ranked(["near", "mid", "far"]) == ["mid", "far", "near"]
    s.add("later")
    assert s.ranked(["later", "far"]) == ["far", "later"]


@pytest.mark.parametrize("kind", union_members(SourceSelection), ids=member_id)
def test_every_selection_type_builds_its_policy(kind):
    policy = sample_of({WeightedSelection: WeightedPolicy, OrderedSelection: OrderedPolicy}, kind)
    assert type(source_policy(["a", "b"], ClientConfig(selection=kind()))) is policy


def test_the_config_type_chooses_the_policy():
    weighted = source_policy(["a"], ClientConfig(seed=3))
    assert isinstance(weighted, WeightedPolicy) and weighted.exploration == 0.1
    tuned = ClientConfig.model_validate({"selection": {"type": "weighted", "exploration": 0.5}})
    assert source_policy(["a"], tuned).exploration == 0.5
    ordered = source_policy(["a", "b"], ClientConfig.model_validate({"selection": {"type": "ordered"}}))
    assert isinstance(ordered, OrderedPolicy) and ordered.backoff_max_s == 10.0


@pytest.mark.parametrize(
    "selection, problem",
    [
        ({"type": "nearest"}, "union_tag_invalid"),
        ({"type": "ordered", "exploration": 0.1}, "extra_forbidden"),
    ],
)
def test_an_unknown_policy_or_a_foreign_knob_is_refused(selection, problem):
    with pytest.raises(ValueError, match=problem):
        ClientConfig.model_validate({"selection": selection})


def test_a_relay_follows_its_upstreams_with_the_policy_its_config_names(tmp_path):
    from swarmrl.configs.shardcast import RelayConfig
    from swarmrl.shardcast.relay import Relay

    upstreams = ["http://a:1", "http://b:2"]
    ordered = Relay(
        RelayConfig(upstreams=upstreams, data_dir=tmp_path, selection={"type": "ordered"}), "ab" * 32
    )
    assert (
        isinstance(ordered.selector, OrderedPolicy) and ordered.selector.ranked(upstreams[::-1]) == upstreams
    )
    assert isinstance(
        Relay(RelayConfig(upstreams=upstreams, data_dir=tmp_path), "ab" * 32).selector, WeightedPolicy
    )
