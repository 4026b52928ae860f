"""What broker_min's Prometheus metrics cost: throughput with ``--metrics-port`` against without it.

Two broker_min child processes run side by side, one with ``--metrics-port``
(scraped every ``--scrape-interval`` seconds while it works, as Prometheus
would) and one without.  Each round, for both brokers in alternating order, a
kafkakit producer sends N records of S bytes one ``send()`` at a time to a fresh
one-partition topic, then a kafkakit consumer reads them back; every client runs
in its own interpreter.  The figure is the on/off ratio of the rates, the
median of the per-round ratios (rounds interleave, so machine noise hits both).

    python benchmarks/broker_metrics_overhead.py               # 300,000 x 100 B, 3 rounds
    python benchmarks/broker_metrics_overhead.py --smoke       # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODES = ("off", "on")
ROLES = ("produce", "consume")


# --------------------------------------------------------------------------- workers (one per process)


async def _produce(spec: dict[str, Any]) -> float:
    from kafkakit import Producer

    value, n = (b"0123456789abcdef" * (spec["size"] // 16 + 1))[: spec["size"]], spec["records"]
    async with Producer(bootstrap_servers=spec["bootstrap"]) as producer:
        await producer.partitions_for(spec["topic"])
        send, topic = producer.send, spec["topic"]
        start = time.perf_counter()
        for _ in range(n):
            await send(topic, value)
        await producer.flush()
        return time.perf_counter() - start


async def _consume(spec: dict[str, Any]) -> float:
    from kafkakit import Consumer, TopicPartition

    async with Consumer(bootstrap_servers=spec["bootstrap"], auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(spec["topic"], 0)])
        start, seen = time.perf_counter(), 0
        while seen < spec["records"]:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                seen += len(records)
        return time.perf_counter() - start


def run_worker(spec: dict[str, Any]) -> float:
    worker = _produce if spec["role"] == "produce" else _consume
    return asyncio.run(worker(spec))


def spawn(spec: dict[str, Any], timeout: float) -> float:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec['role']} ({spec['mode']}) failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- harness


def create_topic(bootstrap: str, name: str) -> None:
    from kafkakit import Admin, NewTopic

    async def create() -> None:
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(name, 1)])

    asyncio.run(create())


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return str(response.read().decode())


class Scraper:
    """Scrapes an endpoint every ``interval`` seconds on a thread while a run is going."""

    def __init__(self, address: str, interval: float) -> None:
        self.address, self.interval, self.scrapes = address, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            scrape(self.address)
            self.scrapes += 1

    def __enter__(self) -> Scraper:
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def messages_in(text: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafkakit_broker_messages_in_total":
                return float(sample.value)
    raise AssertionError("no kafkakit_broker_messages_in_total in the scrape")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tests.brokers import BrokerMinProcess, free_port

    results: dict[str, Any] = {"args": vars(args), "seconds": {}, "rates": {}, "ratio": {}, "scrapes": 0}
    timeout = max(180.0, args.records / 2000)
    metrics_port = free_port()
    with tempfile.TemporaryDirectory(prefix="kafkakit-metricsbench-") as tmp:
        brokers = {
            "off": BrokerMinProcess(Path(tmp) / "off"),
            "on": BrokerMinProcess(Path(tmp) / "on", extra_args=["--metrics-port", str(metrics_port)]),
        }
        address = f"127.0.0.1:{metrics_port}"
        try:
            for broker in brokers.values():
                broker.start()
            times: dict[str, list[float]] = {f"{role}/{mode}": [] for role in ROLES for mode in MODES}
            for round_ in range(args.rounds):
                for mode in MODES if round_ % 2 == 0 else reversed(MODES):
                    bootstrap = brokers[mode].bootstrap_servers
                    topic = f"metrics-{mode}-{uuid.uuid4().hex[:8]}"
                    create_topic(bootstrap, topic)
                    spec = {"size": args.size, "records": args.records, "bootstrap": bootstrap,
                            "topic": topic, "mode": mode}  # fmt: skip
                    with Scraper(address, args.scrape_interval if mode == "on" else 0) as scraper:
                        for role in ROLES:
                            seconds = spawn({**spec, "role": role}, timeout)
                            times[f"{role}/{mode}"].append(seconds)
                            print(f"round {round_ + 1} {role} metrics {mode}: {args.records / seconds:,.0f} rec/s",
                                  flush=True)  # fmt: skip
                    results["scrapes"] += scraper.scrapes
            # The instrumented broker really counted: every record it was sent (plus nothing else).
            results["messages_in_on"] = messages_in(scrape(address))
        finally:
            for broker in brokers.values():
                broker.stop()
    results["seconds"] = times
    for key, values in times.items():
        results["rates"][key] = args.records / statistics.median(values)
    for role in ROLES:
        # on/off rate ratio per round (= off/on seconds), then the median over rounds.
        pairs = zip(times[f"{role}/off"], times[f"{role}/on"], strict=True)
        results["ratio"][role] = statistics.median(off / on for off, on in pairs)
    return results


def report(results: dict[str, Any]) -> str:
    args, times = results["args"], results["seconds"]
    lines = [
        f"{args['records']:,} records x {args['size']} B, {args['rounds']} interleaved rounds, "
        f"kafkakit per-record send() then a consumer; the 'on' broker scraped every {args['scrape_interval']} s "
        f"({results['scrapes']} scrapes)",
        "",
        "| role | round | metrics off rec/s | metrics on rec/s | on/off |",
        "|---|---:|---:|---:|---:|",
    ]
    for role in ROLES:
        for i, (off, on) in enumerate(zip(times[f"{role}/off"], times[f"{role}/on"], strict=True)):
            lines.append(f"| {role} | {i + 1} | {args['records'] / off:,.0f} | {args['records'] / on:,.0f} | "
                         f"{off / on:.3f} |")  # fmt: skip
        lines.append(f"| {role} | median | {results['rates'][f'{role}/off']:,.0f} | "
                     f"{results['rates'][f'{role}/on']:,.0f} | {results['ratio'][role]:.3f} |")  # fmt: skip
    lines += ["", "on/off ratio (median of per-round ratios): "
              + ", ".join(f"{role} {results['ratio'][role]:.3f}" for role in ROLES)]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scrape-interval", type=float, default=1.0, help="seconds; 0 = never scrape during runs"
    )
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--smoke", action="store_true", help="10,000 records, 1 round")
    args = parser.parse_args()
    if args.worker:
        print(run_worker(json.loads(args.worker)))
        return
    if args.smoke:
        args.records = args.records if "--records" in sys.argv else 10_000
        args.rounds = 1
    results = measure(args)
    expected = args.records * args.rounds
    if results["messages_in_on"] != expected:
        raise SystemExit(f"the 'on' broker counted {results['messages_in_on']} records, not {expected}")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
