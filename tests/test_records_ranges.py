"""decode_batches_in_ranges: the records of chosen offset ranges, as decode_batches + a filter gives them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafkakit.records import (
    Compression,
    build_control_batch,
    decode_batches,
    decode_batches_in_ranges,
    encode_batch,
    set_base_offset,
)

BASE_TS = 1_700_000_000_000


def _batches(shape: str, codec: Compression) -> bytes:
    """A fetch response's records: several batches at consecutive offsets, a control batch among them."""
    if shape == "uniform":  # big batches of same-size values: the vectorised path
        sizes = [3000, 2500]
        records = [[(None, b"v%07d" % (base + i), BASE_TS + i, ()) for i in range(n)] for base, n in ((0, 3000), (3001, 2500))]
    else:  # small batches with keys, headers and varying lengths: the reference loop
        sizes = [7, 5]
        records = [
            [(b"k%d" % i, b"x" * (i % 4), BASE_TS + i, [("h", b"%d" % i)] if i % 2 else ()) for i in range(n)]
            for n in sizes
        ]
    first = encode_batch(records[0], compression=codec, base_offset=0)
    marker = build_control_batch(7, 0, commit=True, coordinator_epoch=1, timestamp_ms=BASE_TS)
    marker_at = sizes[0]
    marker = bytearray(marker)
    set_base_offset(marker, 0, marker_at)
    second = encode_batch(records[1], compression=codec, base_offset=marker_at + 1)
    return first + bytes(marker) + second


def _expected(data: bytes, ranges: list[tuple[int, int]]) -> list[Any]:
    return [r for r in decode_batches(data, "t", 0) if any(first <= r.offset <= last for first, last in ranges)]


@pytest.mark.parametrize("shape", ["uniform", "mixed"])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
@pytest.mark.parametrize(
    "ranges",
    [
        [(0, 99)],  # a prefix of the first batch
        [(100, 2999), (3001, 3100)],  # across the control batch
        [(2, 3), (3005, 3005), (4000, 9999)],  # several, one past the end
        [(3000, 3000)],  # only the control batch's offset
        [(20000, 20100)],  # beyond every batch
        [],
    ],
)
def test_ranges_give_what_decode_batches_and_a_filter_give(
    shape: str, codec: Compression, ranges: list[tuple[int, int]]
) -> None:
    data = _batches(shape, codec)
    if shape == "mixed":  # the same ranges, scaled to the small batches (7 + marker + 5 records)
        ranges = [(first % 13, min(last, 12)) for first, last in ranges if first % 13 <= min(last, 12)]
    got = decode_batches_in_ranges(data, "t", 0, ranges)
    assert got == _expected(data, ranges)
    assert [r.offset for r in got] == sorted(r.offset for r in got)


def test_ranges_in_any_order_and_a_memoryview() -> None:
    data = _batches("uniform", Compression.NONE)
    ranges = [(3001, 3010), (5, 9)]
    assert decode_batches_in_ranges(memoryview(data), "t", 0, ranges) == _expected(data, ranges)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5600), st.integers(0, 400)), max_size=5))
def test_random_disjoint_ranges(spans: list[tuple[int, int]]) -> None:
    data = _batches("uniform", Compression.NONE)
    ranges: list[tuple[int, int]] = []
    for first, length in sorted(spans):
        if ranges and first <= ranges[-1][1]:
            continue  # keep them disjoint
        ranges.append((first, first + length))
    assert decode_batches_in_ranges(data, "t", 0, ranges) == _expected(data, ranges)


def test_big_uniform_batches_take_the_vectorised_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import kafkakit.records.decoder as decoder

    answers: list[Any] = []
    vectorised = decoder.decode_sections_in_ranges

    def spy(*args: Any) -> Any:
        answers.append(vectorised(*args))
        return answers[-1]

    monkeypatch.setattr(decoder, "decode_sections_in_ranges", spy)
    data = _batches("uniform", Compression.NONE)
    got = decode_batches_in_ranges(data, "t", 0, [(10, 500)])
    assert len(answers) == 1 and answers[0] is not None and got == _expected(data, [(10, 500)])
