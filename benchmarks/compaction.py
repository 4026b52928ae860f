"""Log compaction throughput: broker_min's log cleaner against Apache Kafka's, same input.

Each round creates a compacted topic on each broker, produces the same keyed records
to it with kafkakit (``--records`` records of ``--value-size`` bytes over ``--keys``
keys), rolls the segment (``segment.ms``, then one more record) and waits until the
broker's cleaner has cleaned the partition.  Throughput is what each cleaner reports
for that pass: Kafka's "N MB of log processed in S seconds" line of its log cleaner
(log4j output), broker_min's cleaner summary ("N MB read in S s") captured from its
logger — both time the offset map and the rewrite together.  Rounds alternate the
brokers and the table gives each round's ratio (timings on a shared machine are
noisy: compare ratios from the same run).

    python benchmarks/compaction.py --records 300000 --rounds 3
    python benchmarks/compaction.py --smoke          # a few seconds, broker_min only
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkakit import Admin, NewTopic, Producer  # noqa: E402

# Long enough that producing never rolls the segment: each cleaner gets the whole input in one pass.
SEGMENT_MS = 8000
_KAFKA_STATS = re.compile(
    r"cleaned log (?P<topic>\S+)-0 \(dirty section = \[\d+, \d+\]\)\s*\n\s*"
    r"(?P<mb>[\d.]+) MB of log processed in (?P<secs>[\d.]+) seconds \((?P<rate>[\d.]+) MB/sec\)"
)
# Kafka's log cleaner prints MiB with one decimal; its MB/sec is the precise figure.
_MIB = 1.048576
_MIN_STATS = re.compile(r"cleaned (?P<topic>\S+)-0 offsets .*?: (?P<mb>[\d.]+) MB read in (?P<secs>[\d.]+)s")


class _Capture(logging.Handler):
    """Collects broker_min's cleaner summaries (the in-process broker logs them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def _produce(
    bootstrap: str, topic: str, records: int, keys: int, value_size: int, segment_ms: int
) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        configs = {
            "cleanup.policy": "compact",
            "segment.ms": str(segment_ms),
            "min.cleanable.dirty.ratio": "0.01",
        }
        await admin.create_topics([NewTopic(topic, num_partitions=1, configs=configs)])
    value = b"v" * value_size
    started = time.monotonic()
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        pending = []
        for i in range(records):
            pending.append(await producer.send(topic, value=value, key=b"key-%08d" % (i % keys), partition=0))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        if time.monotonic() - started > segment_ms / 1000:
            print(f"warning: producing took over segment.ms ({segment_ms} ms): the input may span segments")
        await asyncio.sleep(max(segment_ms / 1000 - (time.monotonic() - started), 0) + 0.5)
        await producer.send_and_wait(topic, value=b"roll", key=b"__roll", partition=0)


def _wait_for(source: Any, pattern: re.Pattern[str], topic: str, timeout: float) -> tuple[float, float]:
    """(MB, seconds) of the first cleaner pass over ``topic`` found by ``source()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for match in pattern.finditer(source()):
            if match.group("topic") != topic:
                continue
            mb, secs = float(match.group("mb")), float(match.group("secs"))
            if "rate" in pattern.groupindex:  # Kafka: MiB, and seconds rounded to 0.1
                mb, rate = mb * _MIB, float(match.group("rate")) * _MIB
                return mb, (mb / rate if rate > 0 else secs)
            return mb, secs
        time.sleep(0.2)
    raise TimeoutError(f"no cleaner pass over {topic} within {timeout}s")


def _round(kind: str, server: Any, capture: _Capture, args: argparse.Namespace) -> tuple[float, float]:
    topic = f"compaction-bench-{uuid.uuid4().hex[:8]}"
    asyncio.run(
        _produce(server.bootstrap_servers, topic, args.records, args.keys, args.value_size, args.segment_ms)
    )
    if kind == "kafka":
        log_path = Path(server.log_path)
        return _wait_for(lambda: log_path.read_text(errors="replace"), _KAFKA_STATS, topic, args.timeout)
    return _wait_for(lambda: "\n".join(capture.lines), _MIN_STATS, topic, args.timeout)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=30_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--segment-ms", type=int, default=SEGMENT_MS, help="must exceed the produce time")
    parser.add_argument("--brokers", default="broker_min,kafka", help="comma-separated: broker_min, kafka")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--markdown", type=Path, help="also write the results section to this file")
    parser.add_argument("--smoke", action="store_true", help="tiny run on broker_min only")
    args = parser.parse_args()
    if args.smoke:
        args.records, args.keys, args.rounds, args.brokers = 20_000, 2_000, 1, "broker_min"
        args.segment_ms = 1500
    kinds = [k.strip() for k in args.brokers.split(",") if k.strip()]
    from tests.brokers import BrokerMinServer, KafkaServer

    capture = _Capture()
    logging.getLogger("kafkakit.broker.log.cleaner").addHandler(capture)
    logging.getLogger("kafkakit.broker.log.cleaner").setLevel(logging.INFO)
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        servers: dict[str, Any] = {}
        try:
            for kind in kinds:
                if kind == "kafka":
                    servers[kind] = KafkaServer(Path(tmp) / "kafka")
                else:
                    servers[kind] = BrokerMinServer(Path(tmp) / "broker_min", log_cleaner_backoff_ms=100)
                servers[kind].start()
            for round_no in range(args.rounds):
                order = kinds if round_no % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    mb, secs = _round(kind, servers[kind], capture, args)
                    results[kind].append((mb, secs))
                    rate = mb / secs if secs > 0 else float("inf")
                    print(
                        f"round {round_no + 1} {kind}: {mb:.2f} MB cleaned in {secs:.3f} s = {rate:.2f} MB/s",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    section = _markdown(results, args)
    print(section)
    if args.markdown is not None:
        args.markdown.write_text(section)


def _rate(mb: float, secs: float) -> float:
    return mb / secs if secs > 0 else float("inf")


def _markdown(results: dict[str, list[tuple[float, float]]], args: argparse.Namespace) -> str:
    kinds = list(results)
    names = {"broker_min": "broker_min", "kafka": "Apache Kafka 4.3.1"}
    shown: list[str] = []
    skip = False
    for arg in sys.argv[1:]:
        if skip or arg.startswith("--markdown"):
            skip = arg == "--markdown" and not skip
            continue
        shown.append(shlex.quote(arg))
    command = "python benchmarks/compaction.py " + " ".join(shown)
    lines = [
        "## Log compaction throughput",
        "",
        f"Command: `{command.strip()}`",
        "",
        f"{args.records} records of {args.value_size} bytes over {args.keys} keys, one partition, "
        "compacted once; MB (10^6 bytes) and MB/s as each broker's cleaner reports its pass "
        "(offset map + rewrite; Kafka's MiB figures converted). Kafka runs as tests/brokers.py "
        "starts it (C1 JIT only, serial GC, 512 MiB heap), which handicaps the JVM.",
        "",
        "| round | "
        + " | ".join(f"{names.get(k, k)} MB | {names.get(k, k)} MB/s" for k in kinds)
        + (" | broker_min / Kafka |" if len(kinds) == 2 else " |"),
        "|---" * (1 + 2 * len(kinds) + (1 if len(kinds) == 2 else 0)) + "|",
    ]
    ratios = []
    for i in range(len(results[kinds[0]])):
        cells = []
        for kind in kinds:
            mb, secs = results[kind][i]
            cells += [f"{mb:.1f}", f"{_rate(mb, secs):.2f}"]
        row = f"| {i + 1} | " + " | ".join(cells)
        if len(kinds) == 2 and "broker_min" in results and "kafka" in results:
            ratio = _rate(*results["broker_min"][i]) / _rate(*results["kafka"][i])
            ratios.append(ratio)
            row += f" | {ratio:.2f}"
        lines.append(row + " |")
    if ratios:
        lines += ["", f"Median ratio broker_min / Kafka: {statistics.median(ratios):.2f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
