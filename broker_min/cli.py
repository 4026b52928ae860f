"""``kafkakit-broker`` / ``python -m kafkakit.broker``: run a broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.server import Broker
from kafkakit.errors import KafkaConfigError

log = logging.getLogger("kafkakit.broker")


def build_parser() -> argparse.ArgumentParser:
    """The command line: data dir, listener, and any setting as ``--config key=value``."""
    parser = argparse.ArgumentParser(prog="kafkakit-broker", description="Run a single-node Kafka broker.")
    parser.add_argument("--data-dir", required=True, help="directory for logs and metadata")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9092, help="port to listen on, 0 for any (default 9092)")
    parser.add_argument(
        "--config",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting, e.g. num.partitions=3 or log_retention_ms=60000 (repeatable)",
    )
    parser.add_argument(
        "--add-scram",
        action="append",
        default=[],
        metavar="SPEC",
        help="a SCRAM credential, as kafka-storage takes it: 'SCRAM-SHA-256=[name=alice,password=secret]' (repeatable)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics, 0 for any free port (default: no metrics)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


def parse_settings(pairs: Sequence[str]) -> dict[str, object]:
    """``["a.b=1", ...]`` -> validated keyword settings for :class:`Broker`."""
    raw: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KafkaConfigError(pair, "expected KEY=VALUE")
        raw[key] = value
    config = BrokerConfig.from_strings(raw)
    return {name: getattr(config, name) for name in config.overridden()}


async def run(
    data_dir: str, host: str, port: int, settings: dict[str, object], add_scram: Sequence[str] = ()
) -> None:
    """Serve until SIGINT/SIGTERM, then stop cleanly (logs closed, no recovery needed next time)."""
    broker = Broker(data_dir, host=host, port=port, add_scram=add_scram, **settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    log.info("kafkakit broker listening on %s (data dir %s)", broker.bootstrap_servers, broker.data_dir)
    try:
        await stop.wait()
    finally:
        log.info("kafkakit broker stopping")
        await broker.stop()


def build_cluster_parser() -> argparse.ArgumentParser:
    """``kafkakit-broker cluster``: a local multi-node cluster until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="kafkakit-broker cluster",
        description="Run a local KRaft cluster of combined broker+controller nodes (ids 1..N) until Ctrl-C.",
    )
    parser.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    parser.add_argument("--data-dir", required=True, help="directory for the nodes' data (node-<id>/) and logs")
    parser.add_argument("--host", default="127.0.0.1", help="address every node listens on (default 127.0.0.1)")
    parser.add_argument(
        "--config", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
        help="a setting for every node, e.g. min.insync.replicas=2 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser


async def run_cluster(nodes: int, data_dir: str, host: str, settings: dict[str, str]) -> None:
    """Start the cluster, print its bootstrap servers, and stop every node on SIGINT/SIGTERM."""
    from kafkakit.broker.local_cluster import LocalCluster

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with LocalCluster(nodes, data_dir, host=host, config=settings) as cluster:
        print(cluster.bootstrap_servers, flush=True)
        log.info("%d-node cluster up; node logs in %s; Ctrl-C stops it", nodes, data_dir)
        await stop.wait()
        log.info("stopping the cluster")


def cluster_main(argv: Sequence[str]) -> int:
    """``kafkakit-broker cluster ...``; returns the exit status."""
    args = build_cluster_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raw: dict[str, str] = {}
    for pair in args.config:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            print(f"kafkakit-broker cluster: bad setting {pair!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        raw[key.strip()] = value
    try:
        # Check every setting before any node starts (the cluster supplies the quorum settings).
        BrokerConfig.from_strings({"controller.quorum.voters": "1@127.0.0.1:1", "node.id": "1", "cluster.id": "check", **raw})
    except KafkaConfigError as exc:
        print(f"kafkakit-broker cluster: bad setting {exc}", file=sys.stderr)
        return 2
    if args.nodes < 1:
        print("kafkakit-broker cluster: --nodes must be at least 1", file=sys.stderr)
        return 2
    try:
        asyncio.run(run_cluster(args.nodes, args.data_dir, args.host, raw))
    except RuntimeError as exc:
        print(f"kafkakit-broker cluster: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = parse_settings(args.config)
        if args.metrics_port is not None:
            settings["metrics_port"] = args.metrics_port
        asyncio.run(run(args.data_dir, args.host, args.port, settings, args.add_scram))
    except KafkaConfigError as exc:
        print(f"kafkakit-broker: bad setting {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"kafkakit-broker: {exc}", file=sys.stderr)
        return 1
    return 0
