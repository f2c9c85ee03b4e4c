from pathlib import Path

import pytest

from swarmrl.coordinator.server.ratelimit import TokenBuckets
from swarmrl.coordinator.store.storage import LocalStorage, StorageError
from swarmrl_lab.coordinator_double import FakeClock


def test_bucket_allows_a_burst_then_refills_at_the_rate():
    clock = FakeClock()
    buckets = TokenBuckets(per_minute=3, clock=clock)
    assert [buckets.take("a") for _ in range(4)] == [True, True, True, False]
    assert buckets.take("b")
    clock.advance(19.0)  # 3/min = one token per 20 s
    assert not buckets.take("a")
    clock.advance(1.0)
    assert buckets.take("a")
    assert not buckets.take("a")


def test_local_storage_round_trip(tmp_path):
    storage = LocalStorage(tmp_path / "store")
    source = tmp_path / "f"
    source.write_bytes(b"rows")
    storage.put("runs/r/step_0/n/x.parquet", source)
    assert not source.exists()
    assert storage.get("runs/r/step_0/n/x.parquet") == b"rows"
    assert storage.path("runs/r/step_0/n/x.parquet").parent == tmp_path / "store/runs/r/step_0/n"


@pytest.mark.parametrize("key", ["../escape", "runs/../../etc", "a//b", "/abs", "runs/./x", "sp ace", ""])
def test_keys_cannot_escape_the_root(tmp_path, key):
    storage = LocalStorage(tmp_path / "store")
    with pytest.raises(StorageError):
        storage.path(key)


def test_missing_object_is_a_storage_error(tmp_path):
    with pytest.raises(StorageError, match="no object"):
        LocalStorage(Path(tmp_path)).get("nothing")
