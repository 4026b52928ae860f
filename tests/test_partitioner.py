"""The default partitioner must place keys exactly where the Java client does."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafkakit.producer import partitioner
from kafkakit.producer.partitioner import (
    StickyPartitions,
    default_partitioner,
    murmur2,
    murmur2_reference,
    partition_for_key,
    partitions_for_keys,
)

# Apache Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# BuiltInPartitioner.partitionForKey(key, n) from kafka-clients 4.3.1, run on the JVM,
# for n in (1, 3, 6, 12, 100).
JAVA_PARTITIONS = {
    "": (0, 0, 3, 9, 81),
    "a": (0, 1, 4, 4, 24),
    "key-1": (0, 0, 0, 0, 40),
    "key-2": (0, 2, 2, 2, 2),
    "user-42": (0, 1, 4, 4, 60),
    "order:12345": (0, 0, 0, 0, 16),
    "été": (0, 1, 1, 1, 73),
    "0123456789abcdef": (0, 0, 0, 0, 52),
}
PARTITION_COUNTS = (1, 3, 6, 12, 100)


@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2.items())
def test_murmur2_matches_java_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_PARTITIONS.items())
def test_partition_for_key_matches_java_builtin_partitioner(key: str, expected: tuple[int, ...]) -> None:
    assert tuple(partition_for_key(key.encode(), n) for n in PARTITION_COUNTS) == expected


@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2.items())
def test_python_murmur2_matches_java_utils_test(data: bytes, expected: int) -> None:
    """The line-by-line reference (the oracle of the faster form) gives Java's values too."""
    assert murmur2_reference(data) == expected


@given(st.binary(max_size=200))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    reference = kafka_python_murmur2(data)  # kafka-python returns the unsigned 32-bit value
    assert murmur2(data) & 0xFFFFFFFF == reference & 0xFFFFFFFF
    assert murmur2_reference(data) == murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


@given(st.binary(max_size=300))
def test_fast_murmur2_matches_the_reference(data: bytes) -> None:
    """The producer's murmur2 (merged masks, tail as one int) is Java's line-by-line form."""
    assert partitioner.unsigned_murmur2(data) == murmur2_reference(data) & 0xFFFFFFFF


def test_murmur2_keeps_the_gil() -> None:
    """murmur2 runs while another thread is busy at no extra cost: a hash that released the
    GIL (as the compiled murmurhash2 package does) waited out that thread's 5 ms switch interval."""
    import threading
    import time

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        start = time.perf_counter()
        for i in range(1000):
            partition_for_key(b"key-%07d" % i, 12)
        elapsed = time.perf_counter() - start
    finally:
        stop.set()
        spinner.join()
    # 0.005 s on the 2026-11 VM; releasing the GIL per key (murmurhash2) took 0.34-0.56 s there.
    assert elapsed < 0.1, f"1000 keys took {elapsed:.3f} s with a busy thread"


def test_default_partitioner_uses_all_partitions_for_keys() -> None:
    # A key's partition must not depend on which partitions are available (Java behaviour).
    key = b"user-42"
    assert default_partitioner(key, [0, 1, 2, 3, 4, 5], [0]) == JAVA_PARTITIONS["user-42"][2]


def test_default_partitioner_picks_an_available_partition_for_null_keys() -> None:
    picks = {default_partitioner(None, [0, 1, 2, 3], [1, 3]) for _ in range(200)}
    assert picks == {1, 3}


def test_sticky_partition_holds_until_switched() -> None:
    sticky = StickyPartitions()
    first = sticky.get("t", [0, 1, 2], [0, 1, 2])
    assert all(sticky.get("t", [0, 1, 2], [0, 1, 2]) == first for _ in range(50))
    switched = sticky.next("t", [0, 1, 2], [0, 1, 2], first)
    assert switched != first
    assert sticky.get("t", [0, 1, 2], [0, 1, 2]) == switched


def test_sticky_switch_spreads_over_available_partitions() -> None:
    sticky = StickyPartitions()
    counts: collections.Counter[int] = collections.Counter()
    current = -1
    for _ in range(3000):
        current = sticky.next("t", [0, 1, 2, 3], [0, 2, 3], current)
        counts[current] += 1
    assert set(counts) == {0, 2, 3}
    assert min(counts.values()) > 600  # roughly uniform


def test_sticky_with_one_partition() -> None:
    sticky = StickyPartitions()
    assert sticky.next("t", [0], [0], 0) == 0


@given(st.lists(st.binary(max_size=40), max_size=80), st.sampled_from(PARTITION_COUNTS))
def test_partitions_for_keys_matches_one_key_at_a_time(keys: list[bytes], partitions: int) -> None:
    """The vectorised hash (mixed lengths, tails of 0-3 bytes, under and over the vector threshold)."""
    assert partitions_for_keys(keys, partitions) == [partition_for_key(key, partitions) for key in keys]


@pytest.mark.parametrize("length", [0, 1, 4, 11, 16, 33])
def test_partitions_for_keys_of_one_length(length: int) -> None:
    keys = [bytes([i, 255 - i]) * (length // 2) + bytes([i]) * (length % 2) for i in range(200)]
    assert partitions_for_keys(keys, 100) == [partition_for_key(key, 100) for key in keys]


def test_partitions_for_keys_matches_java() -> None:
    keys = [key.encode() for key in JAVA_PARTITIONS] * 3  # over the vector threshold
    for column, n in enumerate(PARTITION_COUNTS):
        assert partitions_for_keys(keys, n) == [JAVA_PARTITIONS[k.decode()][column] for k in keys]
