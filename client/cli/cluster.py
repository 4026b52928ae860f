"""``kafkakit cluster describe``: the cluster id, the controller and the brokers."""

from __future__ import annotations

import argparse
from typing import Any

from kafkakit.cli.config import add_output_flag, open_admin
from kafkakit.cli.output import emit_json, print_table


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cluster describe``."""
    parser = commands.add_parser("cluster", help="describe the cluster")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("describe", parents=[common], help="cluster id, controller and brokers")
    add_output_flag(p)
    p.set_defaults(func=describe_cluster)


async def describe_cluster(args: argparse.Namespace) -> int:
    async with open_admin(args) as admin:
        cluster = await admin.describe_cluster()
    if args.output == "json":
        emit_json(
            {
                "cluster_id": cluster.cluster_id,
                "controller": cluster.controller_id,
                "brokers": [
                    {"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in cluster.brokers
                ],
            }
        )
        return 0
    print(f"Cluster id: {cluster.cluster_id}")
    print(f"Controller: {cluster.controller_id}")
    print_table(
        ("ID", "HOST", "PORT", "RACK"), [(b.node_id, b.host, b.port, b.rack) for b in cluster.brokers]
    )
    return 0
