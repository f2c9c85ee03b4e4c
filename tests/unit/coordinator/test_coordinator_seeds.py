import hashlib
import hmac

import pytest

from swarmrl.coordinator.seeds import task_seed
from swarmrl.rollouts.assignment import batch_seed

NODE = "ab" * 32


def test_without_secret_it_is_the_public_batch_seed():
    assert task_seed("run", NODE, 3, 1) == batch_seed("run", NODE, 3, 1)


def test_with_secret_it_is_hmac_sha256_truncated_to_63_bits():
    digest = hmac.new(b"s3cret", f"batch\x1frun\x1f{NODE}\x1f3\x1f1".encode(), hashlib.sha256).digest()
    expected = int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)
    assert task_seed("run", NODE, 3, 1, "s3cret") == expected
    assert task_seed("run", NODE.upper(), 3, 1, "s3cret") == expected


def test_every_input_changes_the_seed():
    base = task_seed("run", NODE, 3, 1, "k")
    variants = [
        task_seed("run2", NODE, 3, 1, "k"),
        task_seed("run", "cd" * 32, 3, 1, "k"),
        task_seed("run", NODE, 4, 1, "k"),
        task_seed("run", NODE, 3, 2, "k"),
        task_seed("run", NODE, 3, 1, "k2"),
    ]
    assert len({base, *variants}) == 6
    assert all(0 <= s < 2**63 for s in [base, *variants])


def test_negative_coordinates_are_refused():
    with pytest.raises(ValueError):
        task_seed("run", NODE, -1, 0, "k")
