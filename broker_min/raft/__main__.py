"""Run one quorum voter as a process: ``python -m kafkakit.broker.raft --node-id 1 --voters ... --dir D``.

A test and demo harness until the broker hosts the quorum. It prints one JSON
object per line on stdout: ``{"event": "committed", "offset": N, "value": "..."}``
for each committed entry (in order), ``{"event": "acked", ...}`` when an append of
its own returned (with ``--append-every-ms``, while it leads), and
``{"event": "leader", "leader": id, "epoch": e}`` when the leader it knows changes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

from . import CommittedRecord, NotLeaderError, RaftConfig, Role, parse_voters, start_endpoint


def _emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def _main(args: argparse.Namespace) -> None:
    config = RaftConfig(
        node_id=args.node_id,
        voters=parse_voters(args.voters),
        election_timeout_ms=args.election_timeout_ms,
        fetch_timeout_ms=args.fetch_timeout_ms,
        election_backoff_max_ms=args.election_backoff_max_ms,
        request_timeout_ms=args.request_timeout_ms,
        fetch_max_wait_ms=args.fetch_max_wait_ms,
    )
    endpoint = await start_endpoint(config, Path(args.dir))
    node = endpoint.node

    def on_commit(records: list[CommittedRecord]) -> None:
        for r in records:
            _emit(event="committed", offset=r.offset, value=r.value.decode("utf-8", "replace"))

    node.register(on_commit)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    counter = 0
    seen = (-2, -2)
    while not stop.is_set():
        view = (node.leader_id, node.epoch)
        if view != seen and node.role in (Role.LEADER, Role.FOLLOWER):
            seen = view
            _emit(event="leader", leader=view[0], epoch=view[1])
        if args.append_every_ms and node.role is Role.LEADER:
            value = f"{args.node_id}-{counter}"
            counter += 1
            with contextlib.suppress(NotLeaderError):
                offset = await node.append([value.encode()])
                _emit(event="acked", offset=offset, value=value)
            await asyncio.sleep(args.append_every_ms / 1000)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.02)
    await endpoint.stop(graceful=True)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the voter until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m kafkakit.broker.raft", description=__doc__)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument(
        "--voters", required=True, help="controller.quorum.voters: 1@host:port,2@host:port,..."
    )
    parser.add_argument("--dir", required=True, help="directory of quorum-state and __cluster_metadata-0/")
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    parser.add_argument("--election-backoff-max-ms", type=int, default=1000)
    parser.add_argument("--request-timeout-ms", type=int, default=2000)
    parser.add_argument("--fetch-max-wait-ms", type=int, default=500)
    parser.add_argument(
        "--append-every-ms", type=int, default=0, help="while leading, append a counter this often"
    )
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
