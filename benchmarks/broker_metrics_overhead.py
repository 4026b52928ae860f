"""What broker_min's Prometheus metrics cost: throughput with ``--metrics-port`` against without it.

Two broker_min child processes run side by side, one with ``--metrics-port``
(scraped every ``--scrape-interval`` seconds while it works, as Prometheus
would) and one without.  Each round, for both brokers in alternating order, a
kafkakit producer sends N records of S bytes one ``send()`` at a time to a fresh
one-partition topic, then a kafkakit consumer reads them back; every client runs
in its own interpreter.  The figure is the on/off ratio of the rates, the
median of the per-round ratios (rounds interleave, so machine noise hits both).
Beside it, the broker process's CPU time per record (user + system, from
/proc), which a busy machine disturbs far less than wall-clock rates.

    python benchmarks/broker_metrics_overhead.py               # 300,000 x 100 B, 3 rounds
    python benchmarks/broker_metrics_overhead.py --await-each --records 20000   # a request per record
    python benchmarks/broker_metrics_overhead.py --smoke       # seconds, for CI
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
        if spec["await_each"]:  # one Produce request per record: the request path at its busiest
            for _ in range(n):
                await (await send(topic, value))
        else:
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


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid``'s main thread so far (the broker's event loop does all the work).

    /proc/PID/schedstat counts nanoseconds; /proc/PID/stat only clock ticks (10 ms),
    too coarse for a broker that spends well under a second on a run.
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def samples(text: str, name: str) -> dict[str, float]:
    """The values of sample ``name`` in a scrape, keyed by their ``api`` label (or "")."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = sample.labels.get("api", "")
                out[key] = out.get(key, 0.0) + sample.value
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tests.brokers import BrokerMinProcess, free_port

    results: dict[str, Any] = {
        "args": vars(args), "seconds": {}, "rates": {}, "ratio": {}, "cpu_us": {}, "cpu_ratio": {}, "scrapes": 0,
    }  # fmt: skip
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
            cpu: dict[str, list[float]] = {key: [] for key in times}
            for round_ in range(args.rounds):
                for mode in MODES if round_ % 2 == 0 else reversed(MODES):
                    bootstrap = brokers[mode].bootstrap_servers
                    topic = f"metrics-{mode}-{uuid.uuid4().hex[:8]}"
                    create_topic(bootstrap, topic)
                    spec = {"size": args.size, "records": args.records, "bootstrap": bootstrap,
                            "topic": topic, "mode": mode, "await_each": args.await_each}  # fmt: skip
                    with Scraper(address, args.scrape_interval if mode == "on" else 0) as scraper:
                        for role in ROLES:
                            pid = brokers[mode].pid
                            assert pid is not None
                            cpu_before = cpu_seconds(pid)
                            seconds = spawn({**spec, "role": role}, timeout)
                            times[f"{role}/{mode}"].append(seconds)
                            # Broker CPU per record, start-up of the client process included.
                            cpu[f"{role}/{mode}"].append((cpu_seconds(pid) - cpu_before) / args.records * 1e6)
                            print(f"round {round_ + 1} {role} metrics {mode}: {args.records / seconds:,.0f} rec/s",
                                  flush=True)  # fmt: skip
                    results["scrapes"] += scraper.scrapes
            # The instrumented broker really counted: every record it was sent (plus nothing else).
            final = scrape(address)
            results["messages_in_on"] = samples(final, "kafkakit_broker_messages_in_total")[""]
            results["requests_on"] = samples(final, "kafkakit_broker_requests_total")
        finally:
            for broker in brokers.values():
                broker.stop()
    results["seconds"], results["cpu_us"] = times, cpu
    for key, values in times.items():
        results["rates"][key] = args.records / statistics.median(values)
    for role in ROLES:
        # on/off rate ratio per round (= off/on seconds), then the median over rounds.
        pairs = zip(times[f"{role}/off"], times[f"{role}/on"], strict=True)
        results["ratio"][role] = statistics.median(off / on for off, on in pairs)
        # Summed over rounds: the broker's CPU per run is small, a ratio of sums is steadier.
        cpu_off, cpu_on = sum(cpu[f"{role}/off"]), sum(cpu[f"{role}/on"])
        results["cpu_ratio"][role] = cpu_on / cpu_off if cpu_off > 0 else float("nan")
    return results


def report(results: dict[str, Any]) -> str:
    args, times, cpu = results["args"], results["seconds"], results["cpu_us"]
    lines = [
        f"{args['records']:,} records x {args['size']} B, {args['rounds']} interleaved rounds, "
        f"{'each send awaited (a request per record)' if args['await_each'] else 'send() not awaited'}, "
        f"kafkakit per-record send() then a consumer; the 'on' broker scraped every {args['scrape_interval']} s "
        f"({results['scrapes']} scrapes)",
        "",
        "| role | round | off rec/s | on rec/s | rate on/off | broker CPU off us/rec | on us/rec | CPU on/off |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    n = args["records"]
    for role in ROLES:
        rows = zip(
            times[f"{role}/off"], times[f"{role}/on"], cpu[f"{role}/off"], cpu[f"{role}/on"], strict=True
        )
        for i, (off, on, cpu_off, cpu_on) in enumerate(rows):
            cpu_ratio = f"{cpu_on / cpu_off:.3f}" if cpu_off > 0 else "-"
            lines.append(f"| {role} | {i + 1} | {n / off:,.0f} | {n / on:,.0f} | {off / on:.3f} | "
                         f"{cpu_off:.3f} | {cpu_on:.3f} | {cpu_ratio} |")  # fmt: skip
        lines.append(f"| {role} | median | {results['rates'][f'{role}/off']:,.0f} | "
                     f"{results['rates'][f'{role}/on']:,.0f} | {results['ratio'][role]:.3f} | "
                     f"{statistics.median(cpu[f'{role}/off']):.3f} | {statistics.median(cpu[f'{role}/on']):.3f} | "
                     f"{results['cpu_ratio'][role]:.3f} (sum) |")  # fmt: skip
    requests = results["requests_on"]
    lines += ["", "on/off rate ratio (median of per-round ratios): "
              + ", ".join(f"{role} {results['ratio'][role]:.3f}" for role in ROLES),
              "broker CPU on/off (all rounds summed): "
              + ", ".join(f"{role} {results['cpu_ratio'][role]:.3f}" for role in ROLES),
              f"requests the 'on' broker counted: Produce {requests.get('Produce', 0):,.0f}, "
              f"Fetch {requests.get('Fetch', 0):,.0f}, all {sum(requests.values()):,.0f}"]  # fmt: skip
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
    parser.add_argument(
        "--await-each",
        action="store_true",
        help="await each record's acknowledgement: one Produce request per record (use fewer records)",
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
