"""``kafkakit groups``: list, describe, delete, reset-offsets (like kafka-consumer-groups)."""

from __future__ import annotations

import argparse
from typing import Any

from kafkakit.cli.config import UsageError, add_output_flag, open_admin
from kafkakit.cli.consume import parse_datetime
from kafkakit.cli.output import emit_json, print_table

# States in which a group has no live members, so its offsets may be changed from outside.
_INACTIVE = ("Empty", "Dead")


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``groups`` and its sub-commands."""
    parser = commands.add_parser("groups", help="list, describe, delete consumer groups; reset their offsets")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = sub.add_parser("list", parents=[common], help="every group with its state")
    add_output_flag(p)
    p.set_defaults(func=list_groups)

    p = sub.add_parser("describe", parents=[common], help="offsets, lag and members of a group")
    p.add_argument("--group", required=True)
    add_output_flag(p)
    p.set_defaults(func=describe_group)

    p = sub.add_parser("delete", parents=[common], help="delete groups with no members")
    p.add_argument("--group", action="append", required=True, help="group to delete (repeatable)")
    p.set_defaults(func=delete_groups)

    p = sub.add_parser(
        "reset-offsets", parents=[common], help="move a group's committed offsets (group must be empty)"
    )
    p.add_argument("--group", required=True)
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", help="TOPIC or TOPIC:0,1 (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument(
        "--to-datetime", metavar="ISO", help="e.g. 2024-05-01T12:00:00Z (no zone: local time)"
    )
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="move each committed offset by N (may be negative)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_output_flag(p)
    p.set_defaults(func=reset_offsets)


async def list_groups(args: argparse.Namespace) -> int:
    async with open_admin(args) as admin:
        listings = await admin.list_groups()
    if args.output == "json":
        emit_json(
            [{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type} for g in listings]
        )
    else:
        print_table(
            ("GROUP", "STATE", "PROTOCOL-TYPE"), [(g.group_id, g.state, g.protocol_type) for g in listings]
        )
    return 0


async def describe_group(args: argparse.Namespace) -> int:
    from kafkakit.errors import for_code

    async with open_admin(args) as admin:
        (group,) = await admin.describe_groups([args.group])
        committed = await admin.list_consumer_group_offsets(args.group)
        owners = {tp: m for m in group.members for tp in m.assignment}
        partitions = sorted(set(committed) | set(owners))
        if group.state == "Dead" and not partitions:
            raise for_code(69)(f"consumer group {args.group!r} does not exist")  # GROUP_ID_NOT_FOUND
        ends = await admin.list_offsets(dict.fromkeys(partitions, "latest")) if partitions else {}
    rows = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends[tp].offset if tp in ends else None
        lag = None if current is None or end is None else max(0, end - current)
        member = owners.get(tp)
        rows.append(
            {
                "group": args.group,
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "consumer_id": member.member_id if member else None,
                "host": member.client_host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    if args.output == "json":
        emit_json(
            {
                "group": args.group,
                "state": group.state,
                "coordinator": group.coordinator,
                "members": len(group.members),
                "partitions": rows,
            }
        )
        return 0
    print(
        f"Group: {args.group}\tState: {group.state}\tMembers: {len(group.members)}\tCoordinator: {group.coordinator}"
    )
    headers = (
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    keys = (
        "topic",
        "partition",
        "current_offset",
        "log_end_offset",
        "lag",
        "consumer_id",
        "host",
        "client_id",
    )
    print_table(headers, [tuple(row[k] for k in keys) for row in rows])
    return 0


async def delete_groups(args: argparse.Namespace) -> int:
    names = [n for item in args.group for n in item.split(",") if n]
    async with open_admin(args) as admin:
        await admin.delete_groups(names)
    for name in names:
        print(f"Deleted group {name}.")
    return 0


def _scope(items: list[str]) -> list[tuple[str, list[int] | None]]:
    scope: list[tuple[str, list[int] | None]] = []
    for item in items:
        topic, sep, parts = item.partition(":")
        if not topic:
            raise UsageError(f"--topic {item!r}: expected TOPIC or TOPIC:0,1")
        if not sep:
            scope.append((topic, None))
            continue
        try:
            scope.append((topic, [int(p) for p in parts.split(",") if p.strip()]))
        except ValueError:
            raise UsageError(f"--topic {item!r}: partitions must be numbers") from None
    return scope


async def reset_offsets(args: argparse.Namespace) -> int:
    from kafkakit.errors import UnknownTopicOrPartitionError, for_code
    from kafkakit.structs import TopicPartition

    timestamp = parse_datetime(args.to_datetime) if args.to_datetime else None
    async with open_admin(args) as admin:
        (group,) = await admin.describe_groups([args.group])
        if group.state not in _INACTIVE:
            # NON_EMPTY_GROUP: kafka-consumer-groups refuses the same way.
            raise for_code(68)(
                f"offsets of group {args.group!r} can be reset only while it is inactive; its state is {group.state}"
            )
        committed = await admin.list_consumer_group_offsets(args.group)
        if args.all_topics:
            partitions = sorted(committed)
        else:
            partitions = []
            for topic, wanted in _scope(args.topic):
                (description,) = await admin.describe_topics([topic])
                available = [p.partition for p in description.partitions]
                for p in wanted if wanted is not None else available:
                    if p not in available:
                        raise UnknownTopicOrPartitionError(f"{topic} has no partition {p}")
                    partitions.append(TopicPartition(topic, p))
        earliest = await admin.list_offsets(dict.fromkeys(partitions, "earliest"))
        latest = await admin.list_offsets(dict.fromkeys(partitions, "latest"))
        by_time = (
            await admin.list_offsets(dict.fromkeys(partitions, timestamp)) if timestamp is not None else {}
        )
        plan: dict[TopicPartition, int] = {}
        for tp in partitions:
            low, high = earliest[tp].offset, latest[tp].offset
            if args.to_earliest:
                target = low
            elif args.to_latest:
                target = high
            elif args.to_offset is not None:
                target = args.to_offset
            elif timestamp is not None:
                hit = by_time[tp].offset
                target = high if hit < 0 else hit
            else:
                # No committed offset: shift from the earliest, the position a new member would reset to.
                base = committed[tp].offset if tp in committed else low
                target = base + args.shift_by
            plan[tp] = min(max(target, low), high)  # clamp into the log, as kafka-consumer-groups does
        if args.execute and plan:
            await admin.alter_consumer_group_offsets(args.group, plan)
    rows = [
        (args.group, tp.topic, tp.partition, committed[tp].offset if tp in committed else None, offset)
        for tp, offset in plan.items()
    ]
    if args.output == "json":
        emit_json(
            {
                "group": args.group,
                "executed": bool(args.execute),
                "offsets": [
                    {"topic": t, "partition": p, "previous_offset": prev, "new_offset": new}
                    for _g, t, p, prev, new in rows
                ],
            }
        )
    else:
        print_table(("GROUP", "TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"), rows)
        if not args.execute:
            print("Dry run: nothing was changed; add --execute to commit these offsets.")
    return 0
