"""The test slots of `cpu_slots.py`: how many a test holds, and that a test needing more waits for them."""

import threading

from cpu_slots import holding_slots, slots_needed


def test_a_timing_test_leaves_room_for_cores_minus_one_others():
    assert slots_needed(timing=False, workers=3, cores=2) == 1
    assert slots_needed(timing=True, workers=3, cores=2) == 2  # one other test beside it
    assert slots_needed(timing=True, workers=2, cores=2) == 1  # one worker per core: nothing waits
    assert slots_needed(timing=True, workers=1, cores=2) == 1
    assert slots_needed(timing=True, workers=24, cores=16) == 9  # 15 others beside it


def test_a_test_needing_every_slot_waits_until_the_others_are_done(tmp_path):
    release, holding = threading.Event(), threading.Event()
    acquired = threading.Event()

    def other_test():
        with holding_slots(tmp_path, 1, total=3):
            holding.set()
            release.wait(10)

    def timing_test():
        with holding_slots(tmp_path, 3, total=3):
            acquired.set()

    other = threading.Thread(target=other_test)
    other.start()
    assert holding.wait(10)
    waiting = threading.Thread(target=timing_test)
    waiting.start()
    assert not acquired.wait(0.3)  # two slots are free, it needs three
    release.set()
    assert acquired.wait(10)
    other.join(10)
    waiting.join(10)
    with holding_slots(tmp_path, 3, total=3):  # every slot was given back
        pass
