"""``kafkakit acls`` (like kafka-acls) and ``kafkakit users`` (SCRAM credentials, like kafka-configs --entity-type users)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from kafkakit.cli.config import UsageError, add_output_flag, open_admin
from kafkakit.cli.output import emit_json, print_table

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``acls`` and ``users``."""
    acls = commands.add_parser("acls", help="list, create, delete ACLs")
    sub = acls.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text, func in (
        ("list", "ACLs matching the resource and principal given (all by default)", list_acls),
        ("create", "add ACLs: each principal x operation x resource", create_acls),
        ("delete", "remove the ACLs matching the flags", delete_acls),
    ):
        p = sub.add_parser(action, parents=[common], help=help_text)
        _resource_flags(p)
        p.add_argument(
            "--allow-principal", action="append", default=[], metavar="TYPE:NAME", help="e.g. User:alice"
        )
        p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
        p.add_argument(
            "--allow-host", action="append", default=[], metavar="HOST", help="default * (any host)"
        )
        p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
        p.add_argument(
            "--operation", action="append", default=[], help="Read, Write, Describe, All, ... (repeatable)"
        )
        if action == "list":
            p.add_argument("--principal", help="only ACLs of this principal")
            add_output_flag(p)
        p.set_defaults(func=func)

    users = commands.add_parser("users", help="SCRAM credentials: list, describe, add, delete")
    sub = users.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = sub.add_parser("list", parents=[common], help="every user with SCRAM credentials")
    add_output_flag(p)
    p.set_defaults(func=describe_users)
    p = sub.add_parser("describe", parents=[common], help="a user's SCRAM mechanisms and iterations")
    p.add_argument("--user", action="append", required=True)
    add_output_flag(p)
    p.set_defaults(func=describe_users)
    p = sub.add_parser("add", parents=[common], help="create or replace a SCRAM credential")
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", choices=_MECHANISMS, default="SCRAM-SHA-256")
    p.add_argument("--password", required=True)
    p.add_argument("--iterations", type=int, default=4096)
    p.set_defaults(func=add_user)
    p = sub.add_parser("delete", parents=[common], help="delete a user's SCRAM credential")
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", choices=_MECHANISMS, default="SCRAM-SHA-256")
    p.set_defaults(func=delete_user)


def _resource_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", action="append", default=[], help="topic name (* for all)")
    parser.add_argument("--group", action="append", default=[], help="group id (* for all)")
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        choices=("literal", "prefixed", "any", "match"),
        default=None,
        help="literal (create's default) or prefixed; any/match filter list and delete",
    )


def _operation(name: str) -> Any:
    from kafkakit.acls import AclOperation

    key = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name.strip()).replace("-", "_").upper()
    try:
        return AclOperation[key]
    except KeyError:
        known = ", ".join(op.name.title().replace("_", "") for op in AclOperation if op.value > 1)
        raise UsageError(f"--operation {name!r}: expected one of {known}") from None


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from kafkakit.acls import ResourceType

    found: list[tuple[Any, str]] = [(ResourceType.TOPIC, t) for t in args.topic]
    found += [(ResourceType.GROUP, g) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, "kafka-cluster"))
    return found


def _pattern(args: argparse.Namespace, default: str) -> Any:
    from kafkakit.acls import PatternType

    return PatternType[(args.resource_pattern_type or default).upper()]


def _principals(args: argparse.Namespace) -> list[tuple[str, Any, list[str]]]:
    from kafkakit.acls import AclPermissionType

    for principal in args.allow_principal + args.deny_principal:
        if ":" not in principal:
            raise UsageError(f"principal {principal!r}: expected TYPE:NAME, e.g. User:alice")
    return [(p, AclPermissionType.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal] + [
        (p, AclPermissionType.DENY, args.deny_host or ["*"]) for p in args.deny_principal
    ]


def _rows(bindings: list[Any]) -> list[tuple[str, ...]]:
    return sorted(
        (
            b.principal,
            b.host,
            b.operation.name,
            b.permission_type.name,
            b.resource_type.name,
            b.resource_name,
            b.pattern_type.name,
        )
        for b in bindings
    )


_ACL_HEADERS = ("PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE-TYPE", "RESOURCE", "PATTERN")


def _filters(args: argparse.Namespace, principal: str | None) -> list[Any]:
    from kafkakit.acls import AclBindingFilter, AclOperation, AclPermissionType

    operations = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    pattern = _pattern(args, "any" if args.action == "list" else "literal")
    principals: list[tuple[str | None, Any]] = [(p, perm) for p, perm, _hosts in _principals(args)]
    if principal is not None:
        principals.append((principal, AclPermissionType.ANY))
    if not principals:
        principals = [(None, AclPermissionType.ANY)]
    resources: list[tuple[Any, str | None]] = list(_resources(args))
    if not resources:
        from kafkakit.acls import ResourceType

        resources = [(ResourceType.ANY, None)]
    return [
        AclBindingFilter(rtype, name, pattern, who, None, op, perm)
        for rtype, name in resources
        for who, perm in principals
        for op in operations
    ]


async def list_acls(args: argparse.Namespace) -> int:
    async with open_admin(args) as admin:
        bindings = []
        for acl_filter in _filters(args, args.principal):
            bindings.extend(await admin.describe_acls(acl_filter))
    rows = sorted(set(_rows(bindings)))
    if args.output == "json":
        emit_json(
            [dict(zip((h.lower().replace("-", "_") for h in _ACL_HEADERS), r, strict=True)) for r in rows]
        )
    else:
        print_table(_ACL_HEADERS, rows)
    return 0


async def create_acls(args: argparse.Namespace) -> int:
    from kafkakit.acls import AclBinding

    resources = _resources(args)
    principals = _principals(args)
    if not resources:
        raise UsageError("acls create needs a resource: --topic, --group, --transactional-id or --cluster")
    if not principals:
        raise UsageError("acls create needs --allow-principal or --deny-principal")
    if not args.operation:
        raise UsageError("acls create needs --operation")
    pattern = _pattern(args, "literal")
    if pattern.name in ("ANY", "MATCH"):
        raise UsageError("acls create takes --resource-pattern-type literal or prefixed")
    bindings = [
        AclBinding(rtype, name, principal, _operation(op), permission, pattern, host)
        for rtype, name in resources
        for principal, permission, hosts in principals
        for host in hosts
        for op in args.operation
    ]
    async with open_admin(args) as admin:
        await admin.create_acls(bindings)
    print(f"Created {len(bindings)} ACL(s):")
    print_table(_ACL_HEADERS, _rows(bindings))
    return 0


async def delete_acls(args: argparse.Namespace) -> int:
    if not _resources(args) and not _principals(args):
        raise UsageError(
            "acls delete needs a resource (--topic, --group, --transactional-id, --cluster) or a principal"
        )
    async with open_admin(args) as admin:
        deleted = await admin.delete_acls(_filters(args, None))
    print(f"Deleted {len(deleted)} ACL(s).")
    if deleted:
        print_table(_ACL_HEADERS, _rows(deleted))
    return 0


async def describe_users(args: argparse.Namespace) -> int:
    users = getattr(args, "user", None)
    async with open_admin(args) as admin:
        described = await admin.describe_user_scram_credentials(users)
    rows = sorted((user, c.mechanism, c.iterations) for user, creds in described.items() for c in creds)
    if args.output == "json":
        emit_json(
            {
                user: [{"mechanism": c.mechanism, "iterations": c.iterations} for c in creds]
                for user, creds in sorted(described.items())
            }
        )
    else:
        print_table(("USER", "MECHANISM", "ITERATIONS"), rows)
    return 0


async def add_user(args: argparse.Namespace) -> int:
    from kafkakit.acls import UserScramCredentialUpsertion

    if args.iterations < 4096:
        raise UsageError("--iterations must be at least 4096 (Kafka's minimum)")
    async with open_admin(args) as admin:
        await admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(args.user, args.mechanism, args.password, args.iterations)]
        )
    print(f"Set {args.mechanism} credential of user {args.user}.")
    return 0


async def delete_user(args: argparse.Namespace) -> int:
    from kafkakit.acls import UserScramCredentialDeletion

    async with open_admin(args) as admin:
        await admin.alter_user_scram_credentials([UserScramCredentialDeletion(args.user, args.mechanism)])
    print(f"Deleted {args.mechanism} credential of user {args.user}.")
    return 0
