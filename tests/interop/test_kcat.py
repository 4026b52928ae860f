"""kcat (librdkafka's command-line client) against broker_min: -L metadata, -P with keys/headers, -C."""

from __future__ import annotations

import json

import pytest

from .checks import CODEC_IDS, CODECS, assert_same, batch_codecs, fetch_raw_records, text_records
from .clients import Rec, consume_kcat, now_ms, produce_kcat, run_kcat
from .conftest import TopicFactory

pytestmark = pytest.mark.interop


def test_metadata_lists_topic_and_partitions(bootstrap: str, new_topic: TopicFactory, kcat: str) -> None:
    topic = new_topic(partitions=4)
    listing = json.loads(run_kcat(["-b", bootstrap, "-L", "-J", "-t", topic]))
    (broker,) = listing["brokers"]
    assert f"{broker['name'].rsplit('/', 1)[0]}" == bootstrap
    (entry,) = listing["topics"]
    assert entry["topic"] == topic and "error" not in entry
    assert sorted(p["partition"] for p in entry["partitions"]) == [0, 1, 2, 3]
    assert all(p["leader"] == broker["id"] and [r["id"] for r in p["replicas"]] == [broker["id"]]
               for p in entry["partitions"])  # fmt: skip


def test_metadata_plain_listing_names_topic(bootstrap: str, new_topic: TopicFactory, kcat: str) -> None:
    topic = new_topic(partitions=2)
    text = run_kcat(["-b", bootstrap, "-L"]).decode()
    assert f'topic "{topic}" with 2 partitions:' in text


@pytest.mark.parametrize("codec", CODECS)
def test_produce_then_consume_exactly(bootstrap: str, new_topic: TopicFactory, kcat: str, codec: str) -> None:
    topic = new_topic(partitions=3)
    records = text_records(200, 3, timestamps=None)
    before = now_ms()
    produce_kcat(bootstrap, topic, records, codec=codec)
    window = (before, now_ms())
    assert_same(
        records, consume_kcat(bootstrap, topic, range(3), len(records)), ts_window=window, label=codec
    )
    codecs = batch_codecs(fetch_raw_records(bootstrap, topic, 1))
    assert codecs and set(codecs) == {CODEC_IDS[codec]}, f"stored batches carry codecs {codecs}"


def test_consume_from_offset_and_count(bootstrap: str, new_topic: TopicFactory, kcat: str) -> None:
    """``-o N -c M`` starts mid-partition (inside a compressed batch) and stops after M records."""
    topic = new_topic(partitions=1)
    records = text_records(50, 1, timestamps=None)
    produce_kcat(bootstrap, topic, records, codec="zstd")
    out = run_kcat(
        ["-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "17", "-c", "5", "-f", "%o %k %s\\n"]
    )
    assert out.decode().splitlines() == [f"{17 + i} {r.key.decode()} {r.value.decode()}"  # type: ignore[union-attr]
                                         for i, r in enumerate(records[17:22])]  # fmt: skip


def test_null_value_and_empty_partition(bootstrap: str, new_topic: TopicFactory, kcat: str) -> None:
    """``-Z`` turns an empty value into NULL (a tombstone); an untouched partition ends at once."""
    topic = new_topic(partitions=2)
    run_kcat(["-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-Z"], stdin=b"gone:\nkept:v\n")
    got = consume_kcat(bootstrap, topic, [0, 1], 2)
    assert [(g.partition, g.offset, g.key, g.value) for g in got] == [
        (0, 0, b"gone", None),
        (0, 1, b"kept", b"v"),
    ]


def test_records_with_headers_from_another_run_stay_separate(
    bootstrap: str, new_topic: TopicFactory, kcat: str
) -> None:
    topic = new_topic(partitions=1)
    first = [Rec(0, b"a", b"1", (("h", b"x"),)), Rec(0, b"b", b"2", (("h", b"x"),))]
    second = [Rec(0, b"c", b"3", ())]
    produce_kcat(bootstrap, topic, first, codec="gzip")
    produce_kcat(bootstrap, topic, second, codec="lz4")
    assert_same(first + second, consume_kcat(bootstrap, topic, [0], 3), label="two runs")
