"""What client metrics cost: kafkakit throughput with metrics on vs off, in interleaved rounds.

Each measurement runs in a fresh interpreter (``KAFKAKIT_METRICS=on`` or ``off``)
against one broker_min child process; every round runs each workload with
metrics on and off back to back (the order alternating between rounds), so
drift on a shared machine hits both alike.  Workloads:

- ``produce``: ``await producer.send()`` per record (default settings), then flush;
- ``getmany``: ``consumer.getmany()`` over a pre-filled topic, touching every record;
- ``async-for``: ``async for record in consumer`` over the same topic.

    python benchmarks/metrics_overhead.py                       # 300,000 x 100 B, 5 rounds
    python benchmarks/metrics_overhead.py --smoke               # a few seconds
    python benchmarks/metrics_overhead.py --markdown /tmp/metrics_bench.md

Prints records/s (median over rounds) with metrics on and off and their ratio
(on / off; 1.00 = no cost), the same ratio for records per CPU second of the
client process (less sensitive to other load on the machine), and the
per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOADS = ("produce", "getmany", "async-for")


# --------------------------------------------------------------------------- workers


async def _produce(bootstrap: str, topic: str, n: int, size: int) -> tuple[float, float]:
    from kafkakit import Producer

    value = b"x" * size
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.partitions_for(topic)
        send = producer.send
        start, cpu = time.perf_counter(), time.process_time()
        last = None
        for _ in range(n):
            last = await send(topic, value, partition=0)
        await producer.flush()
        assert last is not None
        await last
        elapsed = (time.perf_counter() - start, time.process_time() - cpu)
        _check(producer.metrics(), "record-send-total", n)
        return elapsed


async def _consume(bootstrap: str, topic: str, n: int, iterate: bool) -> tuple[float, float]:
    from kafkakit import Consumer, TopicPartition

    async with Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        start, cpu = time.perf_counter(), time.process_time()
        seen = total = 0
        if iterate:
            async for record in consumer:
                total += len(record.value)  # touch every record, as an application would
                seen += 1
                if seen == n:
                    break
        else:
            while seen < n:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    seen += len(records)
                    total += sum([len(r.value) for r in records])
        elapsed = (time.perf_counter() - start, time.process_time() - cpu)
        _check(consumer.metrics(), "records-consumed-total", n)
        return elapsed


def _check(values: dict[str, float], name: str, n: int) -> None:
    """With metrics on, the count must be exact (so the run measured real recording); off: empty."""
    if os.environ.get("KAFKAKIT_METRICS") == "off":
        assert values == {}, "metrics recorded although KAFKAKIT_METRICS=off"
    else:
        assert values[name] == n, f"{name}={values.get(name)} after {n} records"


def run_worker(spec: dict[str, object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this client process) for one workload."""
    bootstrap, topic, n = str(spec["bootstrap"]), str(spec["topic"]), int(str(spec["records"]))
    workload = spec["workload"]
    if workload == "produce":
        return asyncio.run(_produce(bootstrap, topic, n, int(str(spec["size"]))))
    return asyncio.run(_consume(bootstrap, topic, n, iterate=workload == "async-for"))


def spawn(spec: dict[str, object], metrics: bool, timeout: float) -> tuple[float, float]:
    env = dict(os.environ, KAFKAKIT_METRICS="on" if metrics else "off")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec['workload']} (metrics {metrics}) failed:\n{out.stderr[-3000:]}")
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


# --------------------------------------------------------------------------- driver


async def _create_topic(bootstrap: str, name: str) -> None:
    from kafkakit import Admin, NewTopic

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(name, 1)])


async def _fill(bootstrap: str, topic: str, n: int, size: int) -> None:
    from kafkakit import Producer

    async with Producer(bootstrap_servers=bootstrap) as producer:
        chunk = 10_000
        for i in range(0, n, chunk):
            await (await producer.send_batch(topic, [b"x" * size] * min(chunk, n - i), partition=0))


#: Per workload, per round: ((records/s on, off), (records per client CPU second on, off)).
Results = dict[str, list[tuple[tuple[float, float], tuple[float, float]]]]


def measure(args: argparse.Namespace) -> Results:
    import tests.brokers as brokers

    results: Results = {w: [] for w in args.workloads}
    timeout = max(120.0, args.records / 2000)
    with tempfile.TemporaryDirectory(prefix="kafkakit-metrics-bench-") as tmp:
        server = brokers.BrokerMinProcess(Path(tmp) / "broker_min")
        server.start()
        try:
            bootstrap = server.bootstrap_servers
            filled = f"metrics-bench-{uuid.uuid4().hex[:8]}"
            asyncio.run(_create_topic(bootstrap, filled))
            asyncio.run(_fill(bootstrap, filled, args.records, args.size))
            for round_ in range(args.rounds):
                for workload in args.workloads:
                    order = (True, False) if round_ % 2 == 0 else (False, True)
                    rates: dict[bool, float] = {}
                    cpu_rates: dict[bool, float] = {}
                    for metrics in order:
                        topic = filled
                        if workload == "produce":
                            topic = f"metrics-bench-{uuid.uuid4().hex[:8]}"
                            asyncio.run(_create_topic(bootstrap, topic))
                        spec = {
                            "workload": workload,
                            "bootstrap": bootstrap,
                            "topic": topic,
                            "records": args.records,
                            "size": args.size,
                        }
                        wall, cpu = spawn(spec, metrics, timeout)
                        rates[metrics], cpu_rates[metrics] = args.records / wall, args.records / cpu
                    results[workload].append(
                        ((rates[True], rates[False]), (cpu_rates[True], cpu_rates[False]))
                    )
                    print(
                        f"round {round_ + 1} {workload:9s} on {rates[True]:>10,.0f}/s  off {rates[False]:>10,.0f}/s"
                        f"  ratio {rates[True] / rates[False]:.3f}  cpu ratio {cpu_rates[True] / cpu_rates[False]:.3f}",
                        flush=True,
                    )
        finally:
            server.stop()
    return results


def report(results: Results, args: argparse.Namespace) -> str:
    lines = [
        f"{args.records:,} records of {args.size} B per run, {args.rounds} interleaved round(s), "
        "broker_min child process, one partition. Wall: records/s; CPU: records per CPU second of "
        "the client process (insensitive to the broker and to other load).",
        "",
        "| workload | on (records/s) | off (records/s) | wall on / off | CPU on / off "
        "| per-round wall on / off | per-round CPU on / off |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for workload, rounds in results.items():
        on = statistics.median(r[0][0] for r in rounds)
        off = statistics.median(r[0][1] for r in rounds)
        wall = [r[0][0] / r[0][1] for r in rounds]
        cpu = [r[1][0] / r[1][1] for r in rounds]
        lines.append(
            f"| {workload} | {on:,.0f} | {off:,.0f} | {statistics.median(wall):.3f} | {statistics.median(cpu):.3f} "
            f"| {', '.join(f'{x:.2f}' for x in wall)} | {', '.join(f'{x:.2f}' for x in cpu)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma list of " + ", ".join(WORKLOADS)
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 3,000 records, 1 round")
    parser.add_argument("--markdown", help="also write the results table to this file")
    args = parser.parse_args()
    if args.worker:
        wall, cpu = run_worker(json.loads(args.worker))
        print(wall, cpu)
        return
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads: {sorted(unknown)}")
    if args.smoke:
        args.records, args.rounds = 3_000, 1
    table = report(measure(args), args)
    print()
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")


if __name__ == "__main__":
    main()
