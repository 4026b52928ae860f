"""Entry point of the ``kafkakit`` command: the parser, the dispatch and the exit codes.

Exit codes: 0 success; 1 a Kafka error (its name is printed, e.g.
``UNKNOWN_TOPIC_OR_PARTITION``); 2 a usage or configuration error (argparse's
own code); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from kafkakit.cli import cluster, consume, groups, perf, produce, security, topics
from kafkakit.cli.config import BOOTSTRAP_ENV, UsageError
from kafkakit.cli.output import error
from kafkakit.errors import BrokerResponseError, KafkaConfigError, KafkaError

EXIT_OK = 0
EXIT_KAFKA_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_EPILOG = f"""\
Connection: --bootstrap-server HOST:PORT (or the {BOOTSTRAP_ENV} environment variable),
--command-config FILE for security settings (Java .properties or TOML, Kafka's names).
Exit codes: 0 ok, 1 Kafka error, 2 usage or configuration error, 130 interrupted."""


def build_parser() -> argparse.ArgumentParser:
    """The ``kafkakit`` argument parser with every command family."""
    parser = argparse.ArgumentParser(
        prog="kafkakit",
        description="Manage and use a Kafka cluster: topics, produce, consume, groups, ACLs, users, perf.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from kafkakit import __version__

    parser.add_argument("--version", action="version", version=f"kafkakit {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    connection = common.add_argument_group("connection")
    connection.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help=f"comma-separated brokers to connect to (default: ${BOOTSTRAP_ENV})",
    )
    connection.add_argument(
        "--command-config",
        metavar="FILE",
        help="client settings with Kafka's names (security.protocol, sasl.jaas.config, ...); .properties or .toml",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (topics, produce, consume, groups, security, cluster, perf):
        module.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (2)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return int(asyncio.run(args.func(args)) or 0)
    except UsageError as exc:
        error(str(exc))
        return EXIT_USAGE
    except KafkaConfigError as exc:
        error(f"invalid setting: {exc}")  # the message starts with the setting's name
        return EXIT_USAGE
    except BrokerResponseError as exc:
        error(str(exc))  # "[3] UNKNOWN_TOPIC_OR_PARTITION: ..." names the Kafka error
        return EXIT_KAFKA_ERROR
    except KafkaError as exc:
        error(f"{type(exc).__name__}: {exc}")
        return EXIT_KAFKA_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def run() -> None:
    """``python -m kafkakit.cli``."""
    raise SystemExit(main())
