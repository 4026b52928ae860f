"""A 3-node broker_min cluster against a 3-node Apache Kafka cluster (issue 13).

Both clusters run at once on this machine: broker_min as ``kafkakit.broker.LocalCluster``
(3 combined broker+controller processes) and Apache Kafka 4.x as ``tests/kafka_cluster.py``'s
``KafkaCluster`` (3 combined KRaft JVMs, 384 MB heaps, no fault proxies). Both get the same
failure-detection settings (broker session 5 s, heartbeats 1 s, replica lag 10 s, quorum
fetch timeout 2 s, no automatic leader rebalance). Every topic has 6 partitions, RF=3 and
``min.insync.replicas=2``. The client is kafkakit for everything.

- Throughput: a kafkakit Producer with its defaults and ``acks="all"`` (so idempotent)
  sends N keyless records of S bytes, either ``await send()`` per record then ``flush()``
  ("send"), or keeping the futures and gathering every 10,000 ("gather"); then a kafkakit
  Consumer (defaults, assigned the 6 partitions) reads the "send" topic back. Each run is a
  fresh interpreter; rounds interleave the clusters (alternating which goes first) and the
  report gives medians and the broker_min/Kafka ratio of each round.
- Failover: a partition whose leader is not the active controller; kill -9 its leader, then
  time until an ``acks="all"`` send to that partition is acknowledged (an already connected
  producer, retrying) and until a survivor's Metadata names a live leader. The killed node is
  started again and the ISR restored before the next round.
- Memory: VmRSS of each node process (the JVM for Kafka) idle after start, after the
  throughput rounds, and VmHWM (peak) then.

    python3 benchmarks/cluster.py                                   # 200,000 x 100 B, 3 rounds
    python3 benchmarks/cluster.py --brokers broker_min --records 2000 --rounds 1   # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTITIONS = 6
REPLICATION = 3
MIN_ISR = 2
#: "gather" keeps the futures of send() and gathers them every GATHER_CHUNK records.
GATHER_CHUNK = 10_000
MODES = ("send", "gather")
#: Failure detection and replication settings given to both clusters (KafkaCluster's own).
SHARED_SETTINGS = {
    "broker.session.timeout.ms": "5000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.lag.time.max.ms": "10000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "1000",
    "auto.leader.rebalance.enable": "false",
    "min.insync.replicas": str(MIN_ISR),
    "group.initial.rebalance.delay.ms": "0",
}
LABELS = {"broker_min": "broker_min", "kafka": "Kafka"}


# --------------------------------------------------------------------------- workers
# Each throughput run is a fresh interpreter: `cluster.py --worker JSON` prints its seconds.


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


async def _produce(bootstrap: str, topic: str, n: int, size: int, mode: str) -> float:
    from kafkakit import Producer

    value = _payload(size)
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        await producer.partitions_for(topic)
        send = producer.send
        start = time.perf_counter()
        if mode == "gather":
            futures = []
            for i in range(1, n + 1):
                futures.append(await send(topic, value))
                if i % GATHER_CHUNK == 0 or i == n:
                    await asyncio.gather(*futures)
                    futures = []
        else:
            last = None
            for _ in range(n):
                last = await send(topic, value)
            await producer.flush()
            assert last is not None
            await last
        return time.perf_counter() - start


async def _consume(bootstrap: str, topic: str, n: int) -> float:
    from kafkakit import Consumer, TopicPartition

    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        start = time.perf_counter()
        deadline = start + max(60.0, n / 2000)
        seen = total = 0
        while seen < n:
            if time.perf_counter() > deadline:
                raise SystemExit(f"consumed {seen} of {n} records of {topic}")
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                seen += len(records)
                total += sum([len(r.value or b"") for r in records])  # touch every record
        if seen != n:
            raise SystemExit(f"consumed {seen} records of {topic}, expected {n}")
        return time.perf_counter() - start


def run_worker(spec: dict[str, Any]) -> float:
    bootstrap, topic, n = str(spec["bootstrap"]), str(spec["topic"]), int(spec["records"])
    if spec["role"] == "produce":
        return asyncio.run(_produce(bootstrap, topic, n, int(spec["size"]), str(spec["mode"])))
    return asyncio.run(_consume(bootstrap, topic, n))


async def spawn_worker(spec: dict[str, Any], timeout: float) -> float:
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", json.dumps(spec), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"worker {spec['role']} on {spec['topic']} timed out after {timeout:.0f}s") from None
    if process.returncode != 0:
        raise RuntimeError(f"worker {spec['role']} on {spec['topic']} failed:\n{err.decode()[-3000:]}")
    return float(out.decode().strip().splitlines()[-1])


# --------------------------------------------------------------------------- process memory


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _status_mib(pid: int, field: str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def process_memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB of ``pid`` and its descendants (summed)."""
    tree, pids, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo.extend(tree.get(current, []))
    return sum(_status_mib(p, "VmRSS") for p in pids), sum(_status_mib(p, "VmHWM") for p in pids)


# --------------------------------------------------------------------------- raw Metadata


async def metadata(address: str, topics: Sequence[str] | None = (), timeout: float = 2.0) -> Any:
    """One Metadata v12 request on a fresh connection to ``host:port``."""
    from kafkakit.protocol import decode_response, encode_request
    from kafkakit.protocol.build import make_request

    host, port = address.rsplit(":", 1)
    wanted = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
    request = make_request(3, 12, topics=wanted, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)  # fmt: skip
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(encode_request(1, "kafkakit-cluster-bench", request))
            await writer.drain()
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            return decode_response(3, 12, await reader.readexactly(size))[1]
        finally:
            writer.close()


async def partition_states(address: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, isr) as the broker at ``address`` describes ``topic``."""
    response = await metadata(address, [topic])
    return {
        int(p.partition_index): (int(p.leader_id), tuple(sorted(int(i) for i in p.isr_nodes)))
        for t in response.topics
        if not int(t.error_code)
        for p in t.partitions
    }


# --------------------------------------------------------------------------- the two clusters


class Target:
    """One running 3-node cluster, as the benchmark uses it."""

    kind = ""

    async def start(self) -> None:
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def address(self, node_id: int) -> str:
        raise NotImplementedError

    def pid(self, node_id: int) -> int | None:
        raise NotImplementedError

    def is_running(self, node_id: int) -> bool:
        raise NotImplementedError

    async def kill(self, node_id: int) -> None:
        raise NotImplementedError

    async def start_node(self, node_id: int) -> None:
        raise NotImplementedError

    async def active_controller(self) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    @property
    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    def live(self) -> list[int]:
        return [n for n in self.node_ids if self.is_running(n)]

    async def wait_healthy(self, topic: str, timeout: float = 120.0) -> None:
        """Until every live node names a live leader and the full replica set as ISR for every partition."""
        deadline = time.monotonic() + timeout
        full = tuple(self.node_ids)
        while True:
            try:
                views = [await partition_states(self.address(n), topic) for n in self.live()]
                if all(len(v) == PARTITIONS and all(isr == full for _, isr in v.values()) for v in views):
                    return
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind}: {topic} not fully replicated after {timeout:.0f}s")
            await asyncio.sleep(0.2)

    async def create_topic(self, topic: str) -> None:
        from kafkakit import Admin, NewTopic

        async with Admin(bootstrap_servers=self.bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, PARTITIONS, REPLICATION, {"min.insync.replicas": str(MIN_ISR)})])
        await self.wait_healthy(topic)


class BrokerMinTarget(Target):
    kind = "broker_min"

    def __init__(self, data_dir: Path) -> None:
        from kafkakit.broker import LocalCluster

        self.cluster = LocalCluster(3, data_dir, config=SHARED_SETTINGS)

    async def start(self) -> None:
        await self.cluster.start()

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.bootstrap_servers)

    def address(self, node_id: int) -> str:
        return str(self.cluster.address(node_id))

    def pid(self, node_id: int) -> int | None:
        return self.cluster.pid(node_id)

    def is_running(self, node_id: int) -> bool:
        return bool(self.cluster.is_running(node_id))

    async def kill(self, node_id: int) -> None:
        await self.cluster.kill(node_id)

    async def start_node(self, node_id: int) -> None:
        await self.cluster.start_node(node_id)

    async def active_controller(self) -> int:
        # broker_min's Metadata names the active controller (Kafka's names a random broker).
        response = await metadata(self.address(self.live()[0]))
        return int(response.controller_id)

    async def close(self) -> None:
        await self.cluster.close()


class KafkaTarget(Target):
    kind = "kafka"

    def __init__(self, data_dir: Path) -> None:
        from tests.kafka_cluster import KafkaCluster

        self.cluster = KafkaCluster(data_dir, 3, proxied=False, server_properties=SHARED_SETTINGS)

    async def start(self) -> None:
        await asyncio.to_thread(self.cluster.start)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def address(self, node_id: int) -> str:
        return self.cluster.direct_address(node_id)

    def pid(self, node_id: int) -> int | None:
        return self.cluster.pid(node_id)

    def is_running(self, node_id: int) -> bool:
        return self.cluster.is_running(node_id)

    async def kill(self, node_id: int) -> None:
        self.cluster.kill(node_id)  # SIGKILL and reap: milliseconds

    async def start_node(self, node_id: int) -> None:
        await asyncio.to_thread(self.cluster.start_node, node_id)

    async def active_controller(self) -> int:
        return await asyncio.to_thread(self.cluster.active_controller)  # DescribeQuorum

    async def close(self) -> None:
        await asyncio.to_thread(self.cluster.close)


def memory(target: Target) -> dict[int, tuple[float, float]]:
    out = {}
    for n in target.node_ids:
        pid = target.pid(n)
        out[n] = process_memory(pid) if pid is not None else (0.0, 0.0)
    return out


# --------------------------------------------------------------------------- phases


async def throughput(targets: list[Target], args: argparse.Namespace, results: dict[str, Any]) -> None:
    timeout = max(120.0, args.records / 1000)
    if args.warmup > 0:  # untimed: connections, JIT (Kafka's C1), the interpreters' caches
        for target in targets:
            topic = f"warmup-{uuid.uuid4().hex[:6]}"
            await target.create_topic(topic)
            spec = {"role": "produce", "mode": "gather", "bootstrap": target.bootstrap, "topic": topic,
                    "records": args.warmup, "size": args.size}  # fmt: skip
            await spawn_worker(spec, timeout)
            await spawn_worker({"role": "consume", "bootstrap": target.bootstrap, "topic": topic, "records": args.warmup}, timeout)
    for r in range(args.rounds):
        order = targets if r % 2 == 0 else targets[::-1]
        for target in order:
            runs = results["throughput"].setdefault(target.kind, {})
            topics = {}
            for mode in MODES:
                topic = topics[mode] = f"bench-{mode}-{r}-{uuid.uuid4().hex[:6]}"
                await target.create_topic(topic)
                spec = {"role": "produce", "mode": mode, "bootstrap": target.bootstrap, "topic": topic,
                        "records": args.records, "size": args.size}  # fmt: skip
                seconds = await spawn_worker(spec, timeout)
                runs.setdefault(f"produce-{mode}", []).append(seconds)
                _progress(f"round {r + 1} {target.kind:10s} produce-{mode:6s} {args.records / seconds:10,.0f} rec/s")
            spec = {"role": "consume", "bootstrap": target.bootstrap, "topic": topics["send"], "records": args.records}
            seconds = await spawn_worker(spec, timeout)
            runs.setdefault("consume", []).append(seconds)
            _progress(f"round {r + 1} {target.kind:10s} consume        {args.records / seconds:10,.0f} rec/s")


async def _wait_new_leader(target: Target, survivor: int, topic: str, partition: int, victim: int) -> float:
    while True:
        try:
            leader, _ = (await partition_states(target.address(survivor), topic))[partition]
            if leader >= 0 and leader != victim:
                return time.perf_counter()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, KeyError):
            pass
        await asyncio.sleep(0.02)


async def _wait_acked(producer: Any, topic: str, partition: int) -> float:
    from kafkakit.errors import KafkaError

    while True:
        try:
            await producer.send_and_wait(topic, b"after-kill", partition=partition)
            return time.perf_counter()
        except KafkaError:
            await asyncio.sleep(0.02)


async def failover(targets: list[Target], args: argparse.Namespace, results: dict[str, Any]) -> None:
    from kafkakit import Producer

    topics = {}
    for target in targets:
        topics[target.kind] = f"failover-{uuid.uuid4().hex[:6]}"
        await target.create_topic(topics[target.kind])
    for r in range(args.failover_rounds):
        last = r == args.failover_rounds - 1
        for target in targets if r % 2 == 0 else targets[::-1]:
            topic = topics[target.kind]
            controller = await target.active_controller()
            leaders = {p: leader for p, (leader, _) in (await partition_states(target.address(controller), topic)).items()}
            candidates = [p for p, leader in sorted(leaders.items()) if leader != controller]
            partition = candidates[r % len(candidates)] if candidates else 0
            victim = leaders[partition]
            survivor = controller if controller != victim else next(n for n in target.live() if n != victim)
            async with Producer(bootstrap_servers=target.bootstrap, acks="all", delivery_timeout_ms=90_000) as producer:
                await producer.send_and_wait(topic, b"before-kill", partition=partition)  # connected to the leader
                start = time.perf_counter()
                await target.kill(victim)
                async with asyncio.timeout(120):
                    meta_at, acked_at = await asyncio.gather(
                        _wait_new_leader(target, survivor, topic, partition, victim),
                        _wait_acked(producer, topic, partition),
                    )
            row = {"victim": victim, "controller": controller, "partition": partition,
                   "metadata_s": meta_at - start, "produce_s": acked_at - start}  # fmt: skip
            results["failover"].setdefault(target.kind, []).append(row)
            _progress(f"failover {r + 1} {target.kind:10s} killed node {victim} (leader of p{partition}): "
                      f"new leader in Metadata {row['metadata_s']:.2f}s, acks=all produce {row['produce_s']:.2f}s")  # fmt: skip
            if not last:
                await target.start_node(victim)
                await target.wait_healthy(topic)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- report


def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(results: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    kinds = [k for k in ("broker_min", "kafka") if k in results["kinds"]]
    both = len(kinds) == 2
    lines = [
        f"## 3-node cluster: broker_min vs Apache Kafka {results.get('kafka_version', '')}".rstrip(),
        "",
        f"Command: `{command}`",
        "",
        f"{os.cpu_count()} cores, load average {results['load_before']} before, {results['load_after']} after; "
        f"{results['elapsed_s']:.0f} s in all. Topics: {PARTITIONS} partitions, RF={REPLICATION}, "
        f"min.insync.replicas={MIN_ISR}; client: kafkakit (Producer defaults + acks=\"all\", Consumer defaults).",
    ]
    if "kafka" in kinds:
        lines += ["", f"Kafka JVMs as tests/kafka_cluster.py runs them: `{' '.join(results['kafka_jvm_opts'])}` "
                  "(C1 only, serial GC: sized for a shared test machine, not tuned for throughput)."]  # fmt: skip
    tp = results["throughput"]
    if tp:
        header = "| workload | " + " | ".join(f"{LABELS[k]} rec/s" for k in kinds)
        header += " | broker_min/Kafka (median) | per round |" if both else " |"
        lines += ["", f"### Throughput: {args.records:,} records x {args.size} B, median of {args.rounds} interleaved rounds", "",
                  header, "|---|" + "---:|" * len(kinds) + ("---:|---|" if both else "")]  # fmt: skip
        names = {"produce-send": "produce, await send() + flush()", "produce-gather": f"produce, gather futures every {GATHER_CHUNK:,}",
                 "consume": "consume the 'send' topic (assign, getmany)"}  # fmt: skip
        for workload, name in names.items():
            cells = [f"{args.records / _med(tp[k][workload]):,.0f}" for k in kinds]
            row = f"| {name} | " + " | ".join(cells)
            if both:
                ratios = [k / b for b, k in zip(tp["broker_min"][workload], tp["kafka"][workload], strict=True)]
                row += f" | {_med(ratios):.2f}x | {', '.join(f'{x:.2f}' for x in ratios)} |"
            else:
                row += " |"
            lines.append(row)
    fo = results["failover"]
    if fo:
        header = "| from the kill -9 until | " + " | ".join(f"{LABELS[k]} s" for k in kinds)
        header += " | broker_min/Kafka |" if both else " |"
        lines += ["", f"### Failover: kill -9 of a partition leader (not the active controller), median of {args.failover_rounds} rounds", "",
                  header, "|---|" + "---:|" * len(kinds) + ("---:|" if both else "")]  # fmt: skip
        for key, name in (("metadata_s", "a survivor's Metadata names a live leader"),
                          ("produce_s", "an acks=all send to the partition is acknowledged")):  # fmt: skip
            meds = {k: _med([row[key] for row in fo[k]]) for k in kinds}
            cells = [f"{meds[k]:.2f} ({', '.join(f'{row[key]:.2f}' for row in fo[k])})" for k in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + (f" | {meds['broker_min'] / meds['kafka']:.2f}x |" if both else " |"))
        lines += ["", "Per round in parentheses. Broker session timeout 5 s on both: the controller fences the dead "
                  "node (and elects new leaders) once its heartbeats stop for that long."]  # fmt: skip
    mem = results["memory"]
    if mem:
        header = "| RSS per node, MiB | " + " | ".join(f"{LABELS[k]} nodes 1/2/3" for k in kinds) + " |"
        lines += ["", "### Memory (VmRSS of each node process; the JVM for Kafka)", "", header, "|---|" + "---:|" * len(kinds)]
        for phase, name, index in (("idle", "idle after start", 0), ("after", "after the throughput rounds", 0),
                                   ("after", "peak (VmHWM) by then", 1)):  # fmt: skip
            if all(phase in mem[k] for k in kinds):
                cells = [" / ".join(f"{mem[k][phase][n][index]:.0f}" for n in sorted(mem[k][phase])) for k in kinds]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- driver


async def run(args: argparse.Namespace) -> dict[str, Any]:
    kinds = args.brokers.split(",")
    unknown = set(kinds) - set(LABELS)
    if unknown:
        raise SystemExit(f"unknown brokers {sorted(unknown)}: use broker_min,kafka")
    results: dict[str, Any] = {"kinds": kinds, "throughput": {}, "failover": {}, "memory": {},
                               "load_before": _load()}  # fmt: skip
    started = time.monotonic()
    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="kafkakit-cluster-bench-") as tmp:
        try:
            for kind in kinds:  # Kafka first if asked: its start is the heavy one
                target: Target = BrokerMinTarget(Path(tmp) / kind) if kind == "broker_min" else KafkaTarget(Path(tmp) / kind)
                await target.start()
                targets.append(target)
                _progress(f"{kind} cluster up at {target.bootstrap}")
            if "kafka" in kinds:
                from tests.brokers import kafka_version
                from tests.kafka_cluster import KAFKA_CLUSTER_JVM_OPTS

                results["kafka_version"] = kafka_version()
                results["kafka_jvm_opts"] = list(KAFKA_CLUSTER_JVM_OPTS)
            await asyncio.sleep(args.settle)
            for target in targets:
                results["memory"][target.kind] = {"idle": memory(target)}
            if args.records > 0 and args.rounds > 0:
                await throughput(targets, args, results)
                for target in targets:
                    results["memory"][target.kind]["after"] = memory(target)
            if not args.skip_failover and args.failover_rounds > 0:
                await failover(targets, args, results)
        finally:
            for target in targets:
                await target.close()
    results["elapsed_s"] = time.monotonic() - started
    results["load_after"] = _load()
    return results


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=200_000, help="records per throughput run")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds")
    parser.add_argument("--failover-rounds", type=int, default=None, help="kill -9 rounds per cluster (default: --rounds)")
    parser.add_argument("--brokers", default="kafka,broker_min", help="comma-separated: broker_min, kafka")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--warmup", type=int, default=20_000, help="untimed records produced and consumed on each cluster first")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds idle after start before the idle RSS")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--out", help="also write the markdown report to this file")
    args = parser.parse_args()
    if args.worker:
        print(run_worker(json.loads(args.worker)))
        return
    if args.failover_rounds is None:
        args.failover_rounds = args.rounds
    command = "python3 benchmarks/cluster.py " + shlex.join(sys.argv[1:])
    results = asyncio.run(run(args))
    text = report(results, args, command.strip())
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
