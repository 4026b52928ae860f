"""Brokers for the test suite: Apache Kafka (a real JVM broker) and kafkakit's own broker.

Every test that talks to "a broker" runs against each kind the session asks for
(see ``tests/conftest.py`` and ``KAFKAKIT_TEST_BROKERS``), so the client is held
to the behaviour of Apache Kafka and broker_min is held to the same tests.

- ``ensure_kafka_jars()`` fetches the Kafka broker with Maven into a cache outside
  the repository; it is the only code here that downloads anything.
- ``KafkaServer`` runs a single-node KRaft Kafka from those jars.
- ``BrokerMinServer`` runs ``kafkakit.broker.Broker`` in this process on a thread
  with its own event loop, so async tests on any loop can talk to it.
- ``BrokerMinProcess`` runs ``python -m kafkakit.broker`` as a child process that
  can be SIGKILLed and restarted on the same data directory (crash recovery).
- ``TestcontainersKafka`` runs Kafka in Docker with testcontainers, where Docker runs.

Run ``python3 tests/brokers.py fetch`` to fetch the jars up front (CI does), or
``python3 tests/brokers.py kafka`` to start a Kafka and print its address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from kafkakit.protocol import ApiKey, decode_response, encode_request
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_POM = REPO_ROOT / "tests" / "kafka" / "pom.xml"
KAFKA_MAIN_JAR_PREFIX = "kafka_2.13-"
TOOLS_MISSING_REASON = (
    "Apache Kafka tests need java and mvn; install them or set KAFKAKIT_TEST_BROKERS=broker_min"
)
_KAFKA_JVM_OPTS = (
    # Small and gentle on a 2-core machine shared with the tests themselves.
    "-Xmx512m",
    "-Xms256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:CICompilerCount=1",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)
LOG4J2_CONFIG = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.network.name = kafka.network.RequestChannel$
logger.network.level = WARN
"""


class BrokerSetupError(RuntimeError):
    """A broker could not be fetched or started; the message carries the evidence."""


class RunningBroker(Protocol):
    """What a test sees of a running broker, whatever its kind."""

    kind: str

    @property
    def bootstrap_servers(self) -> str: ...


# --------------------------------------------------------------------------- helpers

BROKER_KINDS_KNOWN = ("broker_min", "kafka", "testcontainers")
BROKER_KINDS_DEFAULT = "broker_min,kafka"


def requested_broker_kinds(setting: str | None) -> list[str]:
    """Parse ``KAFKAKIT_TEST_BROKERS`` (None means the default ``broker_min,kafka``).

    Raises ValueError on an unknown kind or an empty list, so a typo never
    silently runs fewer brokers than intended.
    """
    raw = BROKER_KINDS_DEFAULT if setting is None else setting
    kinds = list(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in BROKER_KINDS_KNOWN]
    if unknown or not kinds:
        raise ValueError(
            f"KAFKAKIT_TEST_BROKERS={raw!r}: expected a comma list of {', '.join(BROKER_KINDS_KNOWN)}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return kinds


def new_topic_name(prefix: str = "t") -> str:
    """A topic name no other test uses: ``<prefix>-<12 hex digits>``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, below the ephemeral range (see kafkakit.broker.ports)."""
    from kafkakit.broker.ports import free_ports

    return free_ports(1, host)[0]


def compile_kafkakit_bytecode() -> None:
    """Write the checkout's ``.pyc`` files, as ``pip install kafkakit`` does for the wheel.

    An editable install has none, and where PYTHONDONTWRITEBYTECODE is set every process that
    imports kafkakit (broker_min subprocesses, the CLI, Spark's Python workers and runners)
    would compile it from source first: 0.26 s a process on a slow VM (tests/test_cli.py
    88 -> 74 s), which a user's installed kafkakit does not pay.
    """
    import compileall

    for package in ("client", "broker_min", "spark"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def split_address(bootstrap_servers: str) -> tuple[str, int]:
    """``"host:port[,...]"`` -> (host, port) of the first address."""
    first = bootstrap_servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {bootstrap_servers!r}")
    return host, int(port)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker mid-response")
        buf += chunk
    return bytes(buf)


def _round_trip(bootstrap_servers: str, request: Any, timeout: float) -> Any:
    """Send one request on a fresh connection and decode its response."""
    host, port = split_address(bootstrap_servers)
    api_key, version = type(request).__api_key__, type(request).__version__
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(1, "kafkakit-tests", request))
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        correlation_id, response = decode_response(api_key, version, recv_exactly(sock, size))
    if correlation_id != 1:
        raise ConnectionError(f"broker answered correlation id {correlation_id}, expected 1")
    return response


def api_versions(bootstrap_servers: str, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """Ask the broker for its ApiVersions (v3) over a raw socket: {api_key: (min, max)}.

    Raises ``BrokerSetupError`` if the broker answers with an error code.
    """
    request = ApiVersionsRequest(client_software_name="kafkakit-tests", client_software_version="0.1")
    response = _round_trip(bootstrap_servers, request, timeout)
    if int(response.error_code) != 0:
        raise BrokerSetupError(f"ApiVersions answered error code {int(response.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


def metadata_broker_ids(bootstrap_servers: str, timeout: float = 5.0) -> list[int]:
    """Node ids in a Metadata (v12, no topics) response: empty until the broker is unfenced."""
    request = MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    response = _round_trip(bootstrap_servers, request, timeout)
    return [int(b.node_id) for b in response.brokers]


def _wait_until(ready: Any, *, timeout: float, what: str, alive: Any = None, evidence: Any = None) -> None:
    """Poll ``ready()`` until it returns True; fail early if ``alive()`` turns False."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise BrokerSetupError(f"{what} exited while starting.\n{evidence() if evidence else ''}")
        try:
            if ready():
                return
        except (OSError, ConnectionError, BrokerSetupError, ValueError) as exc:
            last_error = exc
        time.sleep(0.1)
    raise BrokerSetupError(
        f"{what} did not answer within {timeout:.0f}s (last error: {last_error!r}).\n"
        f"{evidence() if evidence else ''}"
    )


def _tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return f"--- last {lines} lines of {path} ---\n" + "\n".join(text[-lines:])


def _die_with_parent() -> None:
    """preexec_fn: on Linux, SIGTERM the child when the test process dies (even by SIGKILL),
    so a killed test run leaves no broker eating memory. Elsewhere, a no-op."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if the process is still there after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# --------------------------------------------------------------------------- Kafka jars


def missing_kafka_tools() -> str | None:
    """None when java and mvn are on PATH, else the reason Kafka tests are skipped."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    return f"{TOOLS_MISSING_REASON} (missing: {', '.join(missing)})" if missing else None


def kafka_version() -> str:
    """The Kafka version pinned in tests/kafka/pom.xml (the single place it is written)."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    if match is None:
        raise BrokerSetupError(f"no <kafka.version> in {KAFKA_POM}")
    return match.group(1).strip()


def cache_root() -> Path:
    """``$KAFKAKIT_CACHE`` or ``~/.cache/kafkakit``: outside the repository."""
    configured = os.environ.get("KAFKAKIT_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "kafkakit"


def kafka_lib_dir() -> Path:
    """Where the jars of the pinned Kafka version live once fetched."""
    return cache_root() / f"kafka-{kafka_version()}" / "lib"


def _pom_digest() -> str:
    return hashlib.sha256(KAFKA_POM.read_bytes()).hexdigest()


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    """Serialise fetches between concurrent test sessions on one machine."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_kafka_jars() -> Path:
    """Fetch the Kafka broker jars with Maven unless cached; return the lib directory.

    The cache is valid while its marker records the current pom's digest, so
    editing tests/kafka/pom.xml refetches. Raises ``BrokerSetupError`` (never
    skips) when mvn fails, with Maven's output in the message.
    """
    lib = kafka_lib_dir()
    marker = lib / ".fetched-from-pom"
    digest = _pom_digest()
    if marker.is_file() and marker.read_text().strip() == digest:
        return lib
    if shutil.which("mvn") is None:
        raise BrokerSetupError(TOOLS_MISSING_REASON + " (missing: mvn)")
    with _cache_lock():
        if marker.is_file() and marker.read_text().strip() == digest:
            return lib
        staging = lib.with_name(f"lib.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        _run_maven(staging)
        main_jar = staging / f"{KAFKA_MAIN_JAR_PREFIX}{kafka_version()}.jar"
        if not main_jar.is_file():
            raise BrokerSetupError(f"mvn finished but {main_jar.name} is not in {staging}")
        (staging / ".fetched-from-pom").write_text(digest + "\n")
        # Move the old jars aside rather than deleting them first: a running JVM
        # opens jars lazily by path, and those paths exist again a moment later.
        retired = lib.with_name(f"lib.old-{os.getpid()}")
        if lib.exists():
            lib.rename(retired)
        staging.rename(lib)
        shutil.rmtree(retired, ignore_errors=True)
    return lib


def _run_maven(output_dir: Path) -> None:
    command = [
        "mvn", "-q", "-B", "-f", str(KAFKA_POM),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={output_dir}",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0:
        raise BrokerSetupError(
            f"fetching Kafka jars failed (exit {result.returncode}): {' '.join(command)}\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    print(f"fetched Kafka {kafka_version()} jars into {output_dir} in {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------------- Apache Kafka


def kafka_uuid() -> str:
    """A random Kafka Uuid in its base64 form (Kafka never issues ones starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaServer:
    """A single-node KRaft Apache Kafka (broker + controller in one JVM) for tests.

    ``start()`` formats storage, starts ``kafka.Kafka`` and returns once the broker
    answers ApiVersions and lists itself in Metadata (i.e. it is unfenced and can
    take produce requests). Logs go to ``<work_dir>/server.log``.
    """

    kind = "kafka"

    def __init__(
        self,
        work_dir: Path | None = None,
        *,
        lib_dir: Path | None = None,
        extra_config: Mapping[str, str] | None = None,
        features: Mapping[str, int] | None = None,
        startup_timeout: float = 90.0,
    ) -> None:
        self._owns_work_dir = work_dir is None
        # Feature levels to format with (``kafka-storage format --feature``), e.g.
        # {"transaction.version": 1}; unset, Kafka 4.3 finalizes transaction.version=2.
        self.features = dict(features or {})
        self.work_dir = Path(tempfile.mkdtemp(prefix="kafkakit-kafka-")) if work_dir is None else work_dir
        self.lib_dir = lib_dir
        self.extra_config = dict(extra_config or {})
        self.startup_timeout = startup_timeout
        self.port = 0
        self.controller_port = 0
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the PLAINTEXT listener."""
        if not self.port:
            raise BrokerSetupError("KafkaServer is not started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The broker's combined stdout/stderr/log4j output."""
        return self.work_dir / "server.log"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    def server_properties(self) -> dict[str, str]:
        """The broker configuration written to server.properties."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            # Abort timed-out transactions within a second (default 10 s), as broker_min does.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Share groups (KIP-932): assignments reach members within a second (default interval 5 s),
            # and tests may set a group's share.record.lock.duration.ms down to 1 s (default minimum 15 s).
            "group.share.min.heartbeat.interval.ms": "500",
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.min.record.lock.duration.ms": "1000",
            # KIP-848 consumer groups: members learn of moves within half a second (default 5 s), a
            # killed member's partitions move after 6 s (default session 45 s, minimum 45 s).
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.session.timeout.ms": "6000",
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.regex.refresh.interval.ms": "10000",  # the minimum: new topics matched sooner
            "group.initial.rebalance.delay.ms": "0",
            # The log cleaner looks for work every 15 s by default: too slow for compaction tests.
            "log.cleaner.backoff.ms": "500",
            # Tests write records with fixed CreateTimes years old (2023 and earlier). With the
            # default 7-day retention, the retention check (every 5 min) deleted them mid-test
            # whenever it came between a write and a read: a Spark source test then failed
            # with "records 25..29 ... were deleted before they were read (log start offset 30)".
            "log.retention.ms": "-1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
        }
        props.update(self.extra_config)
        return props

    def _java_command(self, main_class: str, *args: str) -> list[str]:
        assert self.lib_dir is not None
        return [
            "java", *_KAFKA_JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp", f"{self.lib_dir}/*", main_class, *args,
        ]  # fmt: skip

    def _write_config(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{k}={v}\n" for k, v in self.server_properties().items())
        self.config_path.write_text(body)
        (self.work_dir / "log4j2.properties").write_text(LOG4J2_CONFIG)

    def _format_storage(self) -> None:
        command = self._java_command(
            "kafka.tools.StorageTool", "format", "-t", kafka_uuid(), "-c", str(self.config_path),
            *(arg for name, level in self.features.items() for arg in ("--feature", f"{name}={level}")),
        )  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise BrokerSetupError(
                f"kafka-storage format failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
            )

    def start(self) -> None:
        """Format, launch and wait for the broker (``BrokerSetupError`` on failure).

        Ports are picked free just before launch; if another process grabs one in
        between, the launch is retried on new ports (up to 3 attempts).
        """
        if self._proc is not None:
            raise BrokerSetupError("KafkaServer already started")
        if self.lib_dir is None:
            self.lib_dir = ensure_kafka_jars()
        started = time.monotonic()
        for attempt in range(1, 4):
            try:
                self._launch_and_wait()
                break
            except BrokerSetupError as exc:
                self._kill_process()
                if attempt == 3 or "Address already in use" not in str(exc):
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - started

    def _launch_and_wait(self) -> None:
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        shutil.rmtree(self.work_dir / "data", ignore_errors=True)  # left by a failed attempt
        self._write_config()
        self._format_storage()
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self._java_command("kafka.Kafka", str(self.config_path)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                preexec_fn=_die_with_parent,
            )
        _wait_until(
            self._is_ready,
            timeout=self.startup_timeout,
            what=f"Kafka on {self.bootstrap_servers}",
            alive=lambda: self._proc is not None and self._proc.poll() is None,
            evidence=lambda: _tail(self.log_path),
        )

    def _kill_process(self) -> None:
        if self._proc is not None:
            _terminate(self._proc, timeout=5)
            self._proc = None

    def _is_ready(self) -> bool:
        versions = api_versions(self.bootstrap_servers, timeout=2.0)
        return ApiKey.PRODUCE in versions and 1 in metadata_broker_ids(self.bootstrap_servers, timeout=2.0)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the JVM (controlled shutdown), SIGKILL after ``timeout`` seconds."""
        if self._proc is not None:
            _terminate(self._proc, timeout)
            self._proc = None
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- broker_min


class BrokerMinServer:
    """kafkakit's broker running in this process on a background thread and event loop.

    The broker's loop is private to its thread, so tests (sync, or async on any
    loop) reach it only over sockets, exactly like a separate process.
    """

    kind = "broker_min"

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.data_dir = data_dir
        self.config = config
        self._bootstrap: str | None = None
        #: listener name -> "host:port" of every listener, once started
        self.listeners: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise BrokerSetupError("BrokerMinServer is not started")
        return self._bootstrap

    def start(self, timeout: float = 30.0) -> None:
        """Start the broker thread and wait until the broker answers ApiVersions."""
        self._thread = threading.Thread(target=self._run, name="broker_min", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise BrokerSetupError(f"broker_min did not start within {timeout}s")
        if self._failure is not None:
            raise BrokerSetupError(f"broker_min failed to start: {self._failure!r}") from self._failure
        _wait_until(
            lambda: ApiKey.PRODUCE in api_versions(self.bootstrap_servers),
            timeout=timeout,
            what=f"broker_min on {self._bootstrap}",
            alive=lambda: self._thread is not None and self._thread.is_alive(),
        )

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start() or stop(), never lost
            self._failure = exc
        finally:
            self._started.set()
            loop.close()

    async def _serve(self) -> None:
        from kafkakit.broker import Broker  # imported late: broker_min is optional for Kafka-only runs

        self._stop_requested = asyncio.Event()
        broker = Broker(self.data_dir, host="127.0.0.1", port=0, **self.config)
        await broker.start()
        try:
            self._bootstrap = broker.bootstrap_servers
            self.listeners = {name: f"{host}:{port}" for name, (host, port) in broker.state.listener_endpoints.items()}
            self._started.set()
            await self._stop_requested.wait()
        finally:
            await broker.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker gracefully and join its thread; re-raise what the broker raised."""
        thread, loop, stop = self._thread, self._loop, self._stop_requested
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed between the check and the call
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)
        self._thread = None
        if thread.is_alive():
            raise BrokerSetupError(f"broker_min did not stop within {timeout}s")
        if self._failure is not None and self._bootstrap is not None:
            raise BrokerSetupError(f"broker_min failed while running: {self._failure!r}") from self._failure

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class BrokerMinProcess:
    """``python -m kafkakit.broker`` as a child process on a fixed port and data dir.

    ``kill()`` is a crash (SIGKILL, nothing flushed); ``restart()`` starts a new
    process on the same data directory and port, so clients reconnect to the same
    address and tests can check what survived.
    """

    kind = "broker_min"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 30.0,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log_path = log_path or data_dir.parent / f"{data_dir.name}.broker.log"
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "kafkakit.broker",
            "--data-dir", str(self.data_dir), "--port", str(self.port), *self.extra_args,
        ]  # fmt: skip

    def start(self) -> None:
        """Launch the process and wait until it answers ApiVersions."""
        if self.is_running():
            raise BrokerSetupError("BrokerMinProcess already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== start #{self.starts + 1}: {' '.join(self.command())}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},  # its log is evidence when it crashes
                preexec_fn=_die_with_parent,
            )
        self.starts += 1
        try:
            _wait_until(
                lambda: ApiKey.PRODUCE in api_versions(self.bootstrap_servers),
                timeout=self.startup_timeout,
                what=f"kafkakit broker process on {self.bootstrap_servers}",
                alive=self.is_running,
                evidence=lambda: _tail(self.log_path),
            )
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the broker and reap it: a crash, not a shutdown."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self._proc is not None:
            _terminate(self._proc, timeout)

    def restart(self, *, crash: bool = True) -> None:
        """Kill (or, with ``crash=False``, stop) the broker, then start it on the same dir and port."""
        self.kill() if crash else self.stop()
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- testcontainers


def docker_unavailable_reason() -> str | None:
    """None when ``docker info`` reaches a running engine, else why testcontainers is skipped."""
    if shutil.which("docker") is None:
        return "testcontainers tests need Docker: no docker command on PATH"
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return "testcontainers tests need a running Docker engine: `docker info` timed out"
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return f"testcontainers tests need a running Docker engine: `docker info` failed: {detail[-1] if detail else ''}"
    return None


# testcontainers' KafkaContainer drives Confluent's image scripts, so it needs a
# cp-kafka image (7.4+ for KRaft); override with KAFKAKIT_TESTCONTAINERS_IMAGE.
TESTCONTAINERS_DEFAULT_IMAGE = "confluentinc/cp-kafka:7.9.0"


class TestcontainersKafka:
    """Kafka in a Docker container via testcontainers' Kafka module (KRaft mode)."""

    __test__ = False  # not a pytest test class despite the name
    kind = "testcontainers"

    def __init__(self, image: str | None = None) -> None:
        self.image = image or os.environ.get("KAFKAKIT_TESTCONTAINERS_IMAGE") or TESTCONTAINERS_DEFAULT_IMAGE
        self._container: Any = None
        self._bootstrap: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise BrokerSetupError("TestcontainersKafka is not started")
        return self._bootstrap

    def start(self) -> None:
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers before the community/ split
            from testcontainers.kafka import KafkaContainer

        container = KafkaContainer(self.image).with_kraft()
        container.start(timeout=120)
        self._container = container
        self._bootstrap = container.get_bootstrap_server()
        _wait_until(
            lambda: ApiKey.PRODUCE in api_versions(self.bootstrap_servers),
            timeout=60,
            what=f"Kafka container on {self._bootstrap}",
        )

    def stop(self) -> None:
        if self._container is not None:
            self._container.stop()
            self._container = None


# --------------------------------------------------------------------------- CLI


def _main(argv: Sequence[str]) -> int:
    """``fetch``: fetch the Kafka jars; ``kafka``: run a Kafka until Ctrl-C, printing its address."""
    action = argv[0] if argv else "fetch"
    if action == "fetch":
        print(ensure_kafka_jars())
        return 0
    if action == "kafka":
        with KafkaServer() as server:
            print(
                f"Kafka {kafka_version()} on {server.bootstrap_servers} "
                f"(started in {server.startup_seconds:.1f}s, log {server.log_path})",
                flush=True,
            )
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return 0
    print(f"usage: {sys.argv[0]} [fetch|kafka]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
