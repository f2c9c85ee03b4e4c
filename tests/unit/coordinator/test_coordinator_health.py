import pytest
from pydantic import ValidationError

from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.rules.health import Health, dead_cutoff, health_of, missed_beats
from swarmrl_lab.coordinator_double import FakeClock


@pytest.mark.parametrize(
    ("age", "missed"), [(0.0, 0), (11.9, 0), (12.0, 1), (21.9, 1), (22.0, 2), (32.0, 3), (1000.0, 99)]
)
def test_missed_beats_counts_due_heartbeats_after_grace(age, missed):
    assert missed_beats(100.0, 100.0 + age, interval_s=10.0, grace_s=2.0) == missed


def test_clock_going_backwards_counts_nothing_missed():
    assert missed_beats(100.0, 50.0, interval_s=10.0, grace_s=0.0) == 0


def test_state_machine_follows_the_clock_intellect2_defaults():
    config = CoordinatorConfig(heartbeat_interval_s=10.0, heartbeat_grace_s=0.0, dead_after_missed=3)
    clock = FakeClock()
    last_seen = clock()
    seen = []
    for _ in range(5):
        seen.append(health_of(last_seen, clock(), config))
        clock.advance(10.0)
    assert seen == [Health.HEALTHY, Health.UNHEALTHY, Health.UNHEALTHY, Health.DEAD, Health.DEAD]
    last_seen = clock()  # a heartbeat arrives
    assert health_of(last_seen, clock(), config) is Health.HEALTHY


def test_unhealthy_threshold_is_configurable():
    config = CoordinatorConfig(
        heartbeat_interval_s=1.0, heartbeat_grace_s=0.0, unhealthy_after_missed=2, dead_after_missed=4
    )
    assert [health_of(0.0, t, config) for t in (1.0, 2.0, 3.0, 4.0)] == [
        Health.HEALTHY,
        Health.UNHEALTHY,
        Health.UNHEALTHY,
        Health.DEAD,
    ]


def test_dead_before_unhealthy_is_rejected():
    with pytest.raises(ValidationError):
        CoordinatorConfig(unhealthy_after_missed=3, dead_after_missed=2)


def test_severity_mapping_with_default():
    config = CoordinatorConfig(
        reject_severity={"toploc": "hard", "termination": "soft"}, default_reject_severity="soft"
    )
    assert config.severity_of("toploc") == "hard"
    assert config.severity_of("termination") == "soft"
    assert config.severity_of("unknown") == "soft"


def test_the_dead_cutoff_is_where_health_of_says_dead():
    config = CoordinatorConfig(heartbeat_interval_s=10.0, heartbeat_grace_s=2.0, dead_after_missed=3)
    assert dead_cutoff(100.0, config) == 100.0 - 2.0 - 3 * 10.0
    assert health_of(68.0, 100.0, config) is Health.DEAD  # last seen at the cutoff
    assert health_of(68.5, 100.0, config) is not Health.DEAD
