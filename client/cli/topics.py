"""``kafkakit topics``: list, create, describe, delete, alter-config (like kafka-topics and kafka-configs)."""

from __future__ import annotations

import argparse
from typing import Any

from kafkakit.cli.config import UsageError, add_output_flag, open_admin
from kafkakit.cli.output import emit_json, print_table


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``topics`` and its sub-commands."""
    parser = commands.add_parser("topics", help="list, create, describe, delete topics; alter their configs")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=[common], help="topic names, one per line")
    p.add_argument("--include-internal", action="store_true", help="list __consumer_offsets and the like too")
    add_output_flag(p)
    p.set_defaults(func=list_topics)

    p = sub.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=-1, help="partition count (default: the broker's)")
    p.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas per partition (default: the broker's)"
    )
    p.add_argument(
        "--config", action="append", metavar="KEY=VALUE", default=[], help="a topic config (repeatable)"
    )
    p.add_argument("--if-not-exists", action="store_true", help="succeed when the topic exists already")
    p.set_defaults(func=create_topic)

    p = sub.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR and configs")
    p.add_argument(
        "--topic", action="append", default=[], help="topic to describe (repeatable; default: all)"
    )
    add_output_flag(p)
    p.set_defaults(func=describe_topics)

    p = sub.add_parser("delete", parents=[common], help="delete topics")
    p.add_argument("--topic", action="append", required=True, help="topic to delete (repeatable)")
    p.set_defaults(func=delete_topics)

    p = sub.add_parser("alter-config", parents=[common], help="set or delete topic configs in place")
    p.add_argument("--topic", required=True)
    p.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="configs to set; a list value goes in brackets: cleanup.policy=[compact,delete]",
    )
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K]", help="configs to remove")
    p.set_defaults(func=alter_config)


def parse_config_list(items: list[str], flag: str) -> dict[str, str]:
    """``k=v`` pairs from repeated, comma-separated flags; ``[a,b]`` keeps a list value together."""
    pairs: dict[str, str] = {}
    for item in items:
        for part in _split_top_level(item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{flag} {part!r}: expected key=value")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            pairs[key.strip()] = value
    return pairs


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [p for p in parts if p.strip()]


async def list_topics(args: argparse.Namespace) -> int:
    async with open_admin(args) as admin:
        names = sorted(await admin.list_topics(include_internal=args.include_internal))
    if args.output == "json":
        emit_json(names)
    else:
        for name in names:
            print(name)
    return 0


async def create_topic(args: argparse.Namespace) -> int:
    from kafkakit.errors import TopicAlreadyExistsError
    from kafkakit.structs import NewTopic

    configs = parse_config_list(args.config, "--config")
    async with open_admin(args) as admin:
        try:
            await admin.create_topics(
                [NewTopic(args.topic, args.partitions, args.replication_factor, configs)]
            )
        except TopicAlreadyExistsError:
            if not args.if_not_exists:
                raise
            print(f"Topic {args.topic} exists already.")
            return 0
    print(f"Created topic {args.topic}.")
    return 0


async def describe_topics(args: argparse.Namespace) -> int:
    async with open_admin(args) as admin:
        described = await admin.describe_topics(args.topic or None)
        configs = {d.name: await _config_entries(admin, d.name) for d in described}
    if args.output == "json":
        emit_json(
            [
                {
                    "topic": d.name,
                    "topic_id": None if d.topic_id is None else str(d.topic_id),
                    "partitions": [
                        {
                            "partition": p.partition,
                            "leader": p.leader,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                        }
                        for p in d.partitions
                    ],
                    "configs": {e.name: e.value for e in configs[d.name] if not e.sensitive},
                    "overrides": {e.name: e.value for e in configs[d.name] if e.is_override},
                }
                for d in described
            ]
        )
        return 0
    for d in described:
        overrides = ",".join(f"{e.name}={e.value}" for e in configs[d.name] if e.is_override)
        factor = len(d.partitions[0].replicas) if d.partitions else 0
        print(
            f"Topic: {d.name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
            f"ReplicationFactor: {factor}\tConfigs: {overrides}"
        )
        print_table(
            ("PARTITION", "LEADER", "REPLICAS", "ISR"),
            [
                (p.partition, p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)))
                for p in d.partitions
            ],
        )
    return 0


async def _config_entries(admin: Any, topic: str) -> list[Any]:
    """The topic's configs; none when the principal may describe the topic but not its configs."""
    from kafkakit.errors import AuthorizationError

    try:
        entries: list[Any] = await admin.describe_config_entries(topic)
    except AuthorizationError:
        return []
    return entries


async def delete_topics(args: argparse.Namespace) -> int:
    names = [n for item in args.topic for n in item.split(",") if n]
    async with open_admin(args) as admin:
        await admin.delete_topics(names)
    for name in names:
        print(f"Deleted topic {name}.")
    return 0


async def alter_config(args: argparse.Namespace) -> int:
    to_set = parse_config_list(args.add_config, "--add-config")
    to_delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not to_set and not to_delete:
        raise UsageError("alter-config needs --add-config and/or --delete-config")
    changes: dict[str, tuple[Any, str | None]] = {k: ("set", v) for k, v in to_set.items()}
    changes.update({k: ("delete", None) for k in to_delete})
    async with open_admin(args) as admin:
        await admin.incremental_alter_configs(args.topic, changes)
    print(f"Completed updating config for topic {args.topic}.")
    return 0
