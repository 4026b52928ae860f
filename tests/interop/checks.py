"""Record sets, comparisons and a raw-protocol peek used by the interop tests."""

from __future__ import annotations

import datetime
import random
import socket
import string
import struct
from collections.abc import Sequence

from kafkakit.protocol import decode_response, encode_request
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i32, i32Timedelta, i64

from .clients import Got, Rec

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_PRINTABLE = (string.ascii_letters + string.digits + " !#$%&()*+,-./;<=>?@[]^_{|}~").encode()


def text_records(count: int, partitions: int, *, timestamps: int | None, seed: int = 7) -> list[Rec]:
    """Printable, newline-free records that every client (kcat included) can carry.

    Record i goes to partition i % partitions; headers are fixed per partition
    (kcat sets one header set per run) and include a repeated name. With
    ``timestamps`` set, record i gets ``timestamps + i``; None leaves them to the producer.
    """
    rng = random.Random(seed)
    recs = []
    for i in range(count):
        p = i % partitions
        # Repetitive bodies of varied length so every codec has something to squeeze.
        body = bytes(rng.choice(_PRINTABLE) for _ in range(rng.randint(1, 40))) * rng.randint(1, 30)
        headers = (("source", b"interop"), ("partition", str(p).encode()), ("dup", b"1"), ("dup", b"2"))
        recs.append(
            Rec(p, f"key-{i}".encode(), body, headers, None if timestamps is None else timestamps + i)
        )
    return recs


def binary_records(partitions: int, base_ts: int) -> list[Rec]:
    """Edge cases for clients that carry raw bytes: nulls, empties, all 256 byte values, big values."""
    values: list[tuple[bytes | None, bytes | None]] = [
        (None, b"null key"),
        (b"tombstone", None),
        (b"", b""),
        (bytes(range(256)), bytes(range(255, -1, -1))),
        (b"\x00\xff\x00", b"\xc3\x28 not utf-8 \xa0\xa1"),
        (b"big", random.Random(3).randbytes(300_000)),
    ]
    headers: tuple[tuple[str, bytes | None], ...] = (
        ("bin", bytes(range(256))),
        ("empty", b""),
        ("ünï", b"x"),
    )
    return [
        Rec(i % partitions, k, v, headers if i % 2 == 0 else (), base_ts + i)
        for i, (k, v) in enumerate(values)
    ]


def assert_same(
    expected: Sequence[Rec], got: Sequence[Got], *, ts_window: tuple[int, int] | None = None, label: str = ""
) -> None:
    """Every expected record, in order per partition from offset 0, field for field.

    Records without an explicit timestamp must carry one inside ``ts_window`` (ms).
    """
    want: dict[int, list[Rec]] = {}
    for rec in expected:
        want.setdefault(rec.partition, []).append(rec)
    have: dict[int, list[Got]] = {}
    for g in got:
        have.setdefault(g.partition, []).append(g)
    assert sorted(have) == sorted(want), f"{label}: partitions {sorted(have)} != {sorted(want)}"
    for partition, recs in want.items():
        seen = have[partition]
        assert len(seen) == len(recs), (
            f"{label}: partition {partition}: got {len(seen)} records, want {len(recs)}"
        )
        for offset, (rec, g) in enumerate(zip(recs, seen, strict=True)):
            where = f"{label}: partition {partition} offset {offset}"
            assert g.offset == offset, f"{where}: consumer saw offset {g.offset}"
            assert g.key == rec.key, f"{where}: key {g.key!r:.80} != {rec.key!r:.80}"
            assert g.value == rec.value, f"{where}: value {g.value!r:.80} != {rec.value!r:.80}"
            assert g.headers == rec.headers, f"{where}: headers {g.headers!r:.200} != {rec.headers!r:.200}"
            if rec.timestamp is not None:
                assert g.timestamp == rec.timestamp, f"{where}: timestamp {g.timestamp} != {rec.timestamp}"
            elif ts_window is not None:
                lo, hi = ts_window
                assert lo <= g.timestamp <= hi, f"{where}: timestamp {g.timestamp} outside [{lo}, {hi}]"


# --------------------------------------------------------------------------- raw protocol


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection mid-response")
        buf += chunk
    return bytes(buf)


def fetch_raw_records(bootstrap: str, topic: str, partition: int, offset: int = 0) -> bytes:
    """The record-batch bytes a Fetch v4 returns, straight off the wire (no client in between)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    request = FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=100)), min_bytes=i32(1),
        topics=(FetchTopic(topic=topic, partitions=(  # type: ignore[arg-type]
            FetchPartition(partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(50_000_000)),
        )),),
    )  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(7, "interop-raw", request))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        _, response = decode_response(1, 4, _recv_exactly(sock, size))
    data = response.responses[0].partitions[0]
    assert int(data.error_code) == 0, f"raw fetch of {topic}/{partition}: error code {int(data.error_code)}"
    return bytes(data.records or b"")


def batch_codecs(records: bytes) -> list[int]:
    """The compression codec (attributes bits 0-2) of each record batch in ``records``."""
    codecs = []
    pos = 0
    while pos + 12 <= len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        if pos + 12 + length > len(records):
            break  # a trailing partial batch is allowed in a fetch response
        magic = records[pos + 16]
        assert magic == 2, f"batch at byte {pos} has magic {magic}, expected 2"
        (attributes,) = struct.unpack_from(">h", records, pos + 21)
        codecs.append(attributes & 0x07)
        pos += 12 + length
    return codecs
