"""broker_min serves more partitions than it has file descriptors for two per partition.

Each partition's active segment keeps a write descriptor; read descriptors are
cached (least recently used dropped past a quarter of the limit) and small
fetch reads are copied instead of being held as file slices. Before, a Fetch of
10,000 small partitions held a reader per partition and the broker ran out of
descriptors (it could then accept no connection at all). Here the whole broker
runs in a child process whose limit is 700 descriptors, with 500 partitions.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import asyncio, resource, sys, tempfile
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_NOFILE, (700, 700))
    from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
    from kafkakit.broker import Broker

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with Broker(Path(tmp) / "data") as broker:
                async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                    await admin.create_topics([NewTopic("many", 500, 1)])
                async with Producer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5) as producer:
                    for i in range(2000):
                        await producer.send("many", b"%d" % i, partition=i % 500)
                for _ in range(2):  # twice: the second read reopens readers the cache dropped
                    async with Consumer(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as c:
                        c.assign([TopicPartition("many", p) for p in range(500)])
                        seen = 0
                        while seen < 2000:
                            batches = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                            seen += sum(map(len, batches.values()))
                        assert seen == 2000, seen
        print("ok")

    asyncio.run(main())
    """
)


def test_more_partitions_than_two_descriptors_each(tmp_path: Path) -> None:
    script = tmp_path / "many_partitions.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
    assert "Too many open files" not in result.stderr
