"""What TLS and SASL cost: throughput over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT, and connection set-up.

For kafkakit, confluent-kafka and aiokafka, on broker_min (a child process) and
Apache Kafka, each worker in its own interpreter; rounds interleave clients and
protocols, and the figure that matters is each client's slowdown, the ratio of
its SASL_SSL rate to its PLAINTEXT rate in the same run.

    python benchmarks/security.py                 # 1,000,000 x 100 B, 3 rounds, both brokers
    python benchmarks/security.py --smoke         # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLIENTS = ["kafkakit", "confluent", "aiokafka"]
PROTOCOLS = ["PLAINTEXT", "SASL_SSL"]
MECHANISM = "SCRAM-SHA-512"


# --------------------------------------------------------------------------- client settings


def _kafkakit_security(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["protocol"] == "PLAINTEXT":
        return {}
    from kafkakit import create_ssl_context

    return {
        "security_protocol": "SASL_SSL", "ssl_context": create_ssl_context(cafile=spec["ca"]),
        "sasl_mechanism": MECHANISM, "sasl_plain_username": spec["user"], "sasl_plain_password": spec["password"],
    }  # fmt: skip


def _aiokafka_security(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["protocol"] == "PLAINTEXT":
        return {}
    from aiokafka.helpers import create_ssl_context

    return {
        "security_protocol": "SASL_SSL", "ssl_context": create_ssl_context(cafile=spec["ca"]),
        "sasl_mechanism": MECHANISM, "sasl_plain_username": spec["user"], "sasl_plain_password": spec["password"],
    }  # fmt: skip


def _confluent_security(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["protocol"] == "PLAINTEXT":
        return {}
    return {
        "security.protocol": "SASL_SSL", "ssl.ca.location": spec["ca"], "sasl.mechanisms": MECHANISM,
        "sasl.username": spec["user"], "sasl.password": spec["password"],
    }  # fmt: skip


# --------------------------------------------------------------------------- workers (one per process)


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


async def _kafkakit_produce(spec: dict[str, Any]) -> float:
    from kafkakit import Producer

    value, n = _payload(spec["size"]), spec["records"]
    async with Producer(bootstrap_servers=spec["bootstrap"], acks=1, linger_ms=5, max_batch_size=1 << 20,
                        **_kafkakit_security(spec)) as producer:  # fmt: skip
        await producer.partitions_for(spec["topic"])
        start = time.perf_counter()
        send, last = producer.send, None
        for _ in range(n):
            last = await send(spec["topic"], value, partition=0)
        await producer.flush()
        assert last is not None
        await last
        return time.perf_counter() - start


async def _kafkakit_consume(spec: dict[str, Any]) -> float:
    from kafkakit import Consumer, TopicPartition

    tp = TopicPartition(spec["topic"], 0)
    async with Consumer(bootstrap_servers=spec["bootstrap"], auto_offset_reset="earliest",
                        **_kafkakit_security(spec)) as consumer:  # fmt: skip
        consumer.assign([tp])
        start, seen = time.perf_counter(), 0
        while seen < spec["records"]:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                seen += len(records)
        return time.perf_counter() - start


async def _aiokafka_produce(spec: dict[str, Any]) -> float:
    from aiokafka import AIOKafkaProducer

    value, n = _payload(spec["size"]), spec["records"]
    producer = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], acks=1, linger_ms=5, max_batch_size=1 << 20,
                                **_aiokafka_security(spec))  # fmt: skip
    await producer.start()
    try:
        await producer.partitions_for(spec["topic"])
        start = time.perf_counter()
        send, last = producer.send, None
        for _ in range(n):
            last = await send(spec["topic"], value, partition=0)
        await producer.flush()
        assert last is not None
        await last
        return time.perf_counter() - start
    finally:
        await producer.stop()


async def _aiokafka_consume(spec: dict[str, Any]) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], auto_offset_reset="earliest",
                                enable_auto_commit=False, **_aiokafka_security(spec))  # fmt: skip
    await consumer.start()
    try:
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        start, seen = time.perf_counter(), 0
        while seen < spec["records"]:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                seen += len(records)
        return time.perf_counter() - start
    finally:
        await consumer.stop()


def _confluent_produce(spec: dict[str, Any]) -> float:
    from confluent_kafka import Producer

    value, n, topic = _payload(spec["size"]), spec["records"], spec["topic"]
    producer = Producer({
        "bootstrap.servers": spec["bootstrap"], "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000,
        "enable.idempotence": False, **_confluent_security(spec),
    })  # fmt: skip
    producer.list_topics(topic, timeout=10)
    start = time.perf_counter()
    for i in range(n):
        try:
            producer.produce(topic, value, partition=0)
        except BufferError:
            producer.poll(0.01)
            producer.produce(topic, value, partition=0)
        if i & 0xFFFF == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def _confluent_consume(spec: dict[str, Any]) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": spec["bootstrap"], "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", **_confluent_security(spec),
    })  # fmt: skip
    consumer.assign([TopicPartition(spec["topic"], 0, 0)])
    start, seen = time.perf_counter(), 0
    while seen < spec["records"]:
        # Ask for no more than remain: consume() waits out its timeout for a batch it cannot fill.
        wanted = min(100_000, spec["records"] - seen)
        seen += sum(1 for m in consumer.consume(wanted, timeout=1.0) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def run_worker(spec: dict[str, Any]) -> float:
    name = f"_{spec['client']}_{spec['role']}"
    worker = globals()[name]
    result = worker(spec)
    return float(asyncio.run(result) if asyncio.iscoroutine(result) else result)


def spawn(spec: dict[str, Any], timeout: float) -> float:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                         capture_output=True, text=True, timeout=timeout, cwd=ROOT)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"worker {spec['client']}/{spec['role']}/{spec['protocol']} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- connection set-up


async def _kafkakit_connect(spec: dict[str, Any]) -> float:
    from kafkakit import Admin

    start = time.perf_counter()
    async with Admin(bootstrap_servers=spec["bootstrap"], **_kafkakit_security(spec)) as admin:
        await admin.list_topics()
        return time.perf_counter() - start


def _confluent_connect(spec: dict[str, Any]) -> float:
    from confluent_kafka.admin import AdminClient

    start = time.perf_counter()
    AdminClient({"bootstrap.servers": spec["bootstrap"], **_confluent_security(spec)}).list_topics(timeout=10)
    return time.perf_counter() - start


def connect_times(base: dict[str, Any], samples: int) -> dict[str, float]:
    """Median seconds from a new client to its first metadata answer, per client and protocol."""
    times: dict[str, list[float]] = {}
    for _ in range(samples):
        for protocol in PROTOCOLS:
            spec = {**base, "protocol": protocol, "bootstrap": base["listeners"][protocol]}
            times.setdefault(f"kafkakit/{protocol}", []).append(asyncio.run(_kafkakit_connect(spec)))
            times.setdefault(f"confluent/{protocol}", []).append(_confluent_connect(spec))
    return {key: statistics.median(values) for key, values in times.items()}


# --------------------------------------------------------------------------- brokers and driver


def start_broker(kind: str, work: Path) -> tuple[Any, dict[str, str], dict[str, str]]:
    """A broker with PLAINTEXT and SASL_SSL listeners: (server, listeners, credentials)."""
    from tests.brokers import BrokerMinProcess, free_port
    from tests.security_env import USERS, Pki, SecureKafkaServer, add_scram_specs, security_settings

    pki = Pki.create(work / "pki")
    credentials = {"ca": pki.ca, "user": "admin", "password": USERS["admin"]}
    if kind == "kafka":
        server = SecureKafkaServer(work / "kafka", pki)
        server.start()
        return server, {"PLAINTEXT": server.bootstrap_servers, "SASL_SSL": server.listener("SASL_SSL")}, credentials
    plain, secure = free_port(), free_port()
    settings = {
        key: value for key, value in security_settings(pki).items()
        if not key.startswith(("authorizer", "super.", "allow.", "listener.name.ssl.", "listener.name.sasl_plaintext."))
    }  # fmt: skip
    settings["listeners"] = f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{secure}"
    settings["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL"
    args = [arg for key, value in settings.items() for arg in ("--config", f"{key}={value}")]
    args += [arg for spec in add_scram_specs() for arg in ("--add-scram", spec)]
    process = BrokerMinProcess(work / "broker_min", port=plain, extra_args=args)
    process.start()
    return process, {"PLAINTEXT": f"127.0.0.1:{plain}", "SASL_SSL": f"127.0.0.1:{secure}"}, credentials


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"args": vars(args), "rates": {}, "seconds": {}, "slowdown": {}, "connect": {}}
    timeout = max(180.0, args.records / 4000)
    with tempfile.TemporaryDirectory(prefix="kafkakit-secbench-") as tmp:
        for kind in args.brokers.split(","):
            server, listeners, credentials = start_broker(kind, Path(tmp) / kind)
            try:
                base = {"size": args.size, "records": args.records, "listeners": listeners, **credentials}
                times: dict[str, list[float]] = {}
                for _ in range(args.rounds):
                    for client in args.clients.split(","):
                        for protocol in PROTOCOLS:
                            topic = f"sec-{client}-{uuid.uuid4().hex[:8]}"
                            create_topic(listeners["PLAINTEXT"], topic)
                            spec = {**base, "client": client, "protocol": protocol, "topic": topic,
                                    "bootstrap": listeners[protocol]}  # fmt: skip
                            for role in ("produce", "consume"):
                                seconds = spawn({**spec, "role": role}, timeout)
                                times.setdefault(f"{kind}/{role}/{client}/{protocol}", []).append(seconds)
                                print(f"{kind} {role} {client} {protocol}: {args.records / seconds:,.0f} rec/s", flush=True)
                results["seconds"].update(times)
                results["rates"].update(
                    {key: args.records / statistics.median(values) for key, values in times.items()}
                )
                for key in [k for k in times if k.endswith("/PLAINTEXT")]:
                    # A round runs a client's PLAINTEXT and SASL_SSL back to back: pair them per round.
                    pairs = zip(times[key], times[key.replace("PLAINTEXT", "SASL_SSL")], strict=True)
                    ratio = statistics.median(p / s for p, s in pairs)
                    results["slowdown"][key.removesuffix("/PLAINTEXT")] = ratio
                results["connect"][kind] = connect_times(base, args.connect_samples)
            finally:
                server.stop()
    return results


def report(results: dict[str, Any]) -> str:
    rates, lines = results["rates"], []
    for kind in results["args"]["brokers"].split(","):
        for role in ("produce", "consume"):
            lines += [f"### {role}, {kind} (median of {results['args']['rounds']} rounds)", "",
                      "| client | PLAINTEXT rec/s | SASL_SSL rec/s | TLS/plaintext |",
                      "|---|---:|---:|---:|"]  # fmt: skip
            for client in results["args"]["clients"].split(","):
                plain, secure = rates[f"{kind}/{role}/{client}/PLAINTEXT"], rates[f"{kind}/{role}/{client}/SASL_SSL"]
                slowdown = results["slowdown"][f"{kind}/{role}/{client}"]  # median of the per-round ratios
                lines.append(f"| {client} | {plain:,.0f} | {secure:,.0f} | {slowdown:.2f}x |")
            lines.append("")
        connect = results["connect"][kind]
        lines += [f"### connection set-up, {kind} (median ms, new client to first metadata answer)", "",
                  "| client | PLAINTEXT | SASL_SSL (TCP + TLS + SCRAM) |", "|---|---:|---:|"]  # fmt: skip
        for client in ("kafkakit", "confluent"):
            lines.append(f"| {client} | {connect[f'{client}/PLAINTEXT'] * 1000:.1f} | "
                         f"{connect[f'{client}/SASL_SSL'] * 1000:.1f} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", default="broker_min,kafka")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--connect-samples", type=int, default=20)
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--smoke", action="store_true", help="20,000 records, 1 round, broker_min")
    args = parser.parse_args()
    if args.worker:
        print(run_worker(json.loads(args.worker)))
        return
    if args.smoke:
        args.records = args.records if "--records" in sys.argv else 20_000
        args.rounds, args.brokers, args.connect_samples = 1, "broker_min", 3
    results = measure(args)
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
