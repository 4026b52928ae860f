"""Throughput of kafkakit.records next to aiokafka's and kafka-python's record batch code.

Prints records/s (best of ``--repeat`` runs) for each operation and codec, with
ratios kafkakit/aiokafka and kafkakit/kafka-python. aiokafka uses its C
extension when installed; kafka-python is pure Python.

    python benchmarks/records_bench.py            # 200k records of 100 bytes per cell
    python benchmarks/records_bench.py --smoke    # tiny sizes, a few seconds
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.structs import ConsumerRecord as AioConsumerRecord
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafkakit.records import BatchBuilder, Compression, decode_batches, encode_batch, encode_values

Op = Callable[[], Any]


def make_values(count: int, size: int, uniform: bool) -> list[bytes]:
    """Moderately compressible values (a counter and filler), all ``size`` bytes unless not ``uniform``."""
    values = []
    for i in range(count):
        n = size if uniform else size - 10 + i % 21
        values.append((f"{i:010d}-payload-".encode() * (n // 19 + 1))[:n])
    return values


CLOCK = time.process_time  # CPU time of this process: other load on a shared machine skews wall time


def best_rate(op: Op, records: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = CLOCK()
        op()
        best = min(best, CLOCK() - start)
    return records / max(best, 1e-9)


def chunks(values: list[bytes], size: int) -> list[list[bytes]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


# --- encoders -----------------------------------------------------------------------------------


def ours_encode_values(batches: list[list[bytes]], codec: int, ts: int) -> Op:
    return lambda: [encode_values(b, timestamp_ms=ts, compression=codec) for b in batches]


def ours_encode_batch(batches: list[list[bytes]], codec: int, ts: int) -> Op:
    tuples = [[(None, v, ts, ()) for v in b] for b in batches]
    return lambda: [encode_batch(t, compression=codec) for t in tuples]


def ours_builder(batches: list[list[bytes]], codec: int, ts: int) -> Op:
    def run() -> None:
        for values in batches:
            builder = BatchBuilder(compression=codec, max_size=1 << 30)
            append = builder.append
            for value in values:
                append(ts, None, value, ())
            builder.build()

    return run


def foreign_builder(cls: Any, batches: list[list[bytes]], codec: int, ts: int) -> Op:
    def run() -> None:
        for values in batches:
            builder = cls(2, codec, 0, -1, -1, -1, 1 << 30)
            append = builder.append
            for offset, value in enumerate(values):
                append(offset, ts, None, value, [])
            builder.build()

    return run


# --- decoders -------------------------------------------------------------------------------------


def ours_decode(batches: list[bytes]) -> Op:
    fetch = b"".join(batches)  # what a Fetch response carries
    return lambda: decode_batches(fetch, "topic", 0, check_crc=True)


def foreign_decode(cls: Any, batches: list[bytes]) -> Op:
    def run() -> None:
        for raw in batches:
            batch = cls(raw)
            if not batch.validate_crc():
                raise AssertionError("CRC mismatch")
            list(batch)

    return run


def aiokafka_decode_to_consumer_records(batches: list[bytes]) -> Op:
    """What aiokafka's fetcher does per record: iterate the batch, build its ConsumerRecord dataclass."""

    def run() -> None:
        out: list[Any] = []
        append = out.append
        for raw in batches:
            batch = AioBatch(raw)
            if not batch.validate_crc():
                raise AssertionError("CRC mismatch")
            for r in batch:
                key, value = r.key, r.value
                append(AioConsumerRecord(
                    "topic", 0, r.offset, r.timestamp, r.timestamp_type, key, value, r.checksum,
                    len(key) if key is not None else -1, len(value) if value is not None else -1, tuple(r.headers),
                ))

    return run


def row(name: str, codec: Compression, rates: list[float | None]) -> None:
    ours, aio, kp = rates
    cells = [f"{r / 1e3:>10,.0f}k" if r else f"{'-':>11}" for r in rates]
    ratio_aio = f"{ours / aio:>7.2f}x" if ours and aio else f"{'-':>8}"
    ratio_kp = f"{ours / kp:>7.2f}x" if ours and kp else f"{'-':>8}"
    print(f"{name:<26}{codec.name.lower():<8}{''.join(cells)}  {ratio_aio} {ratio_kp}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per measurement")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="runs per cell; the best is reported")
    parser.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    parser.add_argument("--no-kafka-python", action="store_true", help="skip the slow pure-Python baseline")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs (< 5 s)")
    parser.add_argument("--wall", action="store_true", help="time with the wall clock instead of process CPU time")
    args = parser.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    if args.smoke:
        args.records, args.batch, args.repeat = 2000, 500, 1

    codecs = [Compression.from_name(name) for name in args.codecs.split(",")]
    ts = int(time.time() * 1000)
    n, rep = args.records, args.repeat
    uniform = chunks(make_values(n, args.value_size, True), args.batch)
    varied = chunks(make_values(n, args.value_size, False), args.batch)
    with_kp = not args.no_kafka_python

    clock = "wall clock" if args.wall else "process CPU time"
    print(f"{n} records of {args.value_size} bytes, null keys, {args.batch} per batch, best of {rep} ({clock}); records/s")
    print(f"{'operation':<26}{'codec':<8}{'kafkakit':>11}{'aiokafka':>11}{'kafka-py':>11}  {'vs aio':>8} {'vs kp':>8}")
    for codec in codecs:
        c = int(codec)
        row("encode_values", codec, [best_rate(ours_encode_values(uniform, c, ts), n, rep), None, None])
        row("encode_values (varied len)", codec, [best_rate(ours_encode_values(varied, c, ts), n, rep), None, None])
        row("encode_batch", codec, [best_rate(ours_encode_batch(uniform, c, ts), n, rep), None, None])
        row("builder append+build", codec, [
            best_rate(ours_builder(uniform, c, ts), n, rep),
            best_rate(foreign_builder(AioBuilder, uniform, c, ts), n, rep),
            best_rate(foreign_builder(KpBuilder, uniform, c, ts), n, rep) if with_kp else None,
        ])
        encoded = [encode_values(b, timestamp_ms=ts, compression=c) for b in uniform]
        ours_rate = best_rate(ours_decode(encoded), n, rep)
        row("decode (CRC on)", codec, [
            ours_rate,
            best_rate(foreign_decode(AioBatch, encoded), n, rep),
            best_rate(foreign_decode(KpBatch, encoded), n, rep) if with_kp else None,
        ])
        row("decode -> ConsumerRecord", codec, [
            ours_rate, best_rate(aiokafka_decode_to_consumer_records(encoded), n, rep), None,
        ])


if __name__ == "__main__":
    main()
