"""The brokers behind the ``kafka_broker`` fixture.

- :class:`BrokerProcess`: broker_min as a child process (``python -m kafkakit.broker``),
  the default. It takes faults: :meth:`~KafkaBroker.kill` (SIGKILL),
  :meth:`~KafkaBroker.restart` (same data dir and port), :meth:`~KafkaBroker.pause`
  (SIGSTOP) and :meth:`~KafkaBroker.resume` (SIGCONT).
- :class:`BrokerThread`: broker_min on a thread of the test process (faster to start,
  no faults).
- :class:`ExternalBroker`: a broker or cluster someone else runs (``--kafka-bootstrap``).
- :class:`ContainerBroker`: Apache Kafka in Docker through testcontainers.

All of them are :class:`KafkaBroker`: ``bootstrap_servers``, ``data_dir``, ``log_path``
and the log written so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BrokerFaultError",
    "BrokerProcess",
    "BrokerStartError",
    "BrokerThread",
    "ContainerBroker",
    "ExternalBroker",
    "KafkaBroker",
    "docker_unavailable_reason",
]

# What ``kafkakit-broker`` logs once every listener is bound (broker_min/cli.py);
# reading it from the log is how a child started with --port 0 tells its port.
_LISTENING = re.compile(rb"kafkakit broker listening on (\S+):(\d+) ")
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# testcontainers' KafkaContainer drives the scripts of Confluent's build of Apache Kafka.
DEFAULT_CONTAINER_IMAGE = "confluentinc/cp-kafka:7.9.0"


class BrokerFaultError(RuntimeError):
    """A fault (kill, restart, pause, resume) was asked of a broker that cannot take one."""


class BrokerStartError(RuntimeError):
    """The broker did not start; the message carries the end of its log."""


class KafkaBroker:
    """What the ``kafka_broker`` fixture gives a test, whatever runs the broker.

    ``bootstrap_servers`` is the address for any client library; ``data_dir`` and
    ``log_path`` are None where the plugin does not own the broker's files.
    """

    #: "process", "thread", "external" or "testcontainers"
    mode = "external"
    data_dir: Path | None = None
    log_path: Path | None = None

    def __init__(self, bootstrap_servers: str = "") -> None:
        self._bootstrap_servers = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients."""
        if not self._bootstrap_servers:
            raise BrokerStartError(f"the {self.mode} broker is not started")
        return self._bootstrap_servers

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mode} {self._bootstrap_servers or '(not started)'}>"

    # -- the log -----------------------------------------------------------

    def log_size(self) -> int:
        """Bytes of log written so far (a mark for :meth:`log_text`)."""
        if self.log_path is None:
            return 0
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_text(self, since: int = 0) -> str:
        """The broker's log from byte offset ``since`` (a :meth:`log_size` mark) to now."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(since)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def recent_log(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the broker's log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- faults --------------------------------------------------------------

    def _no_faults(self, fault: str) -> BrokerFaultError:
        return BrokerFaultError(
            f"kafka_broker.{fault}() is not supported for an external broker ({self._bootstrap_servers}): "
            "the plugin did not start it. Faults need the default backend, broker_min in a child "
            "process (run without --kafka-bootstrap / KAFKAKIT_TEST_BOOTSTRAP)."
        )

    def kill(self) -> None:
        """SIGKILL the broker: a crash, nothing flushed (process mode only)."""
        raise self._no_faults("kill")

    def restart(self, *, crash: bool = False) -> None:
        """Stop the broker (SIGKILL with ``crash=True``, else SIGTERM) if it runs, then start it
        again on the same data dir and port so that clients reconnect (process mode only)."""
        raise self._no_faults("restart")

    def pause(self) -> None:
        """SIGSTOP the broker: connections stay open but nothing answers (process mode only)."""
        raise self._no_faults("pause")

    def resume(self) -> None:
        """SIGCONT a paused broker (process mode only)."""
        raise self._no_faults("resume")

    def is_running(self) -> bool:
        """Whether the broker answers (False after :meth:`kill` or while paused)."""
        return True

    def ensure_running(self) -> None:
        """Resume or start the broker if a fault left it down; the plugin calls it after each test."""

    def close(self) -> None:
        """Stop the broker if the plugin started it."""


class ExternalBroker(KafkaBroker):
    """A broker or cluster the plugin did not start (``--kafka-bootstrap``)."""

    mode = "external"

    def check_reachable(self, timeout: float = 10.0) -> None:
        """Raise :class:`BrokerStartError` unless some bootstrap address accepts a TCP connection."""
        errors = []
        for address in self.bootstrap_servers.split(","):
            host, _, port = address.strip().rpartition(":")
            if not host or not port.isdigit():
                raise BrokerStartError(
                    f"--kafka-bootstrap {self.bootstrap_servers!r}: expected HOST:PORT[,...]"
                )
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
                return
            except OSError as exc:
                errors.append(f"{address.strip()}: {exc}")
        raise BrokerStartError("cannot reach the external Kafka (--kafka-bootstrap): " + "; ".join(errors))


def _die_with_parent() -> None:
    """preexec_fn: on Linux, SIGTERM the broker when the thread that started it dies (even by
    SIGKILL), so a killed test run leaves no broker behind."""
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class BrokerProcess(KafkaBroker):
    """broker_min as a child process; its stdout and stderr go to ``log_path``."""

    mode = "process"

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        settings: Sequence[str] = (),
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
    ) -> None:
        super().__init__()
        self.data_dir = self._dir = data_dir
        self.log_path = log_path
        self.settings = tuple(settings)
        self.host = host
        self.startup_timeout = startup_timeout
        #: how many times the process was started
        self.starts = 0
        self._port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def pid(self) -> int | None:
        """The running broker's process id."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def command(self) -> list[str]:
        """The child's command line (``--port 0`` the first time, then the port it got)."""
        config = [arg for pair in self.settings for arg in ("--config", pair)]
        return [
            sys.executable, "-m", "kafkakit.broker", "--data-dir", str(self._dir),
            "--host", self.host, "--port", str(self._port), "--log-level", "INFO", *config,
        ]  # fmt: skip

    def start(self) -> None:
        """Launch the child and return once it listens (:class:`BrokerStartError` otherwise)."""
        if self.is_running():
            raise BrokerStartError("the broker process is already running")
        self._dir.mkdir(parents=True, exist_ok=True)
        # A port just freed by a killed broker is normally free again at once (the
        # listener sets SO_REUSEADDR); retry briefly in case something else held it.
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                self._launch(deadline)
                return
            except BrokerStartError as exc:
                if not (self._port and "Address already in use" in str(exc) and time.monotonic() < deadline):
                    raise
                time.sleep(0.25)

    def _launch(self, deadline: float) -> None:
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            log.write(
                f"=== kafkakit.testing: start #{self.starts + 1}: {shlex.join(self.command())}\n".encode()
            )
            log.flush()
            mark = log.tell()
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                # Only the main thread lives as long as the session; a broker started
                # from another thread must not die when that thread ends.
                preexec_fn=_die_with_parent
                if threading.current_thread() is threading.main_thread()
                else None,
            )
        self.starts += 1
        self._paused = False
        while True:
            match = _LISTENING.search(self.log_text(mark).encode())
            if match is not None:
                self._port = int(match.group(2))
                self._bootstrap_servers = f"{match.group(1).decode()}:{self._port}"
                return
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"the broker process exited with status {self._proc.returncode} while starting\n"
                    + self._evidence()
                )
            if time.monotonic() > deadline:
                self._hard_kill()
                raise BrokerStartError(
                    f"the broker did not listen within {self.startup_timeout:.0f}s\n" + self._evidence()
                )
            time.sleep(0.02)

    def _evidence(self) -> str:
        return f"--- last lines of {self.log_path} ---\n{self.recent_log(40)}"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._paused

    def _hard_kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()  # SIGKILL also ends a stopped (paused) process
            self._proc.wait(timeout=10)
        self._paused = False

    def kill(self) -> None:
        self._hard_kill()

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop (SIGTERM, logs closed cleanly), SIGKILL after ``timeout`` seconds."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        if self._paused:
            self.resume()  # a stopped process would not act on SIGTERM
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._hard_kill()

    def restart(self, *, crash: bool = False) -> None:
        if crash:
            self._hard_kill()
        else:
            self.stop()
        self.start()

    def pause(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise BrokerFaultError("kafka_broker.pause(): the broker is not running (killed? call restart())")
        os.kill(self._proc.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)
        self._paused = False

    def ensure_running(self) -> None:
        if self._paused:
            self.resume()
        if self._proc is not None and self._proc.poll() is not None:
            self.start()

    def close(self) -> None:
        self.stop()


class _LogToFile(logging.FileHandler):
    """Writes the ``kafkakit.broker`` logger of this process to the broker's log file."""


class BrokerThread(KafkaBroker):
    """broker_min on a background thread with its own event loop; no faults.

    Its ``kafkakit.broker`` log records go to ``log_path``, as a child's would.
    """

    mode = "thread"

    def __init__(self, data_dir: Path, log_path: Path, *, settings: Sequence[str] = ()) -> None:
        super().__init__()
        self.data_dir = self._dir = data_dir
        self.log_path = log_path
        self.settings = tuple(settings)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._handler: logging.Handler | None = None
        self._saved_level = logging.NOTSET

    def _no_faults(self, fault: str) -> BrokerFaultError:
        return BrokerFaultError(
            f"kafka_broker.{fault}() needs broker_min in a child process, but this session runs it in a "
            "thread (--kafka-broker-mode=thread or kafka_broker_mode = thread). Use "
            "--kafka-broker-mode=process (the default) for tests that inject faults."
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start the broker thread and return once it listens."""
        from kafkakit.broker.cli import parse_settings  # imported late: the plugin stays cheap to load

        settings = parse_settings(self.settings)
        self._capture_log()
        self._thread = threading.Thread(target=self._run, args=(settings,), name="kafka_broker", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout) or self._failure is not None or not self._bootstrap_servers:
            raise BrokerStartError(
                f"broker_min did not start in a thread: {self._failure!r}"
            ) from self._failure

    def _capture_log(self) -> None:
        assert self.log_path is not None
        logger = logging.getLogger("kafkakit.broker")
        handler = _LogToFile(self.log_path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        handler.setLevel(logging.INFO)
        logger.addHandler(handler)
        self._handler = handler
        # INFO records must reach the handler even where logging is left at WARNING.
        self._saved_level = logger.level
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)

    def _run(self, settings: dict[str, Any]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(settings))
        except BaseException as exc:  # reported by start() or close()
            self._failure = exc
        finally:
            self._started.set()
            loop.close()

    async def _serve(self, settings: dict[str, Any]) -> None:
        from kafkakit.broker import Broker

        self._stop = asyncio.Event()
        broker = Broker(self._dir, host="127.0.0.1", port=0, **settings)
        await broker.start()
        try:
            self._bootstrap_servers = broker.bootstrap_servers
            logging.getLogger("kafkakit.broker").info(
                "kafkakit broker listening on %s (data dir %s, in a thread)",
                broker.bootstrap_servers,
                self.data_dir,
            )
            self._started.set()
            await self._stop.wait()
        finally:
            await broker.stop()

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self, timeout: float = 30.0) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is not None:
            if loop is not None and stop is not None:
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    loop.call_soon_threadsafe(stop.set)
            thread.join(timeout)
            self._thread = None
        if self._handler is not None:
            logger = logging.getLogger("kafkakit.broker")
            logger.removeHandler(self._handler)
            logger.setLevel(self._saved_level)
            self._handler.close()
            self._handler = None


def docker_unavailable_reason() -> str | None:
    """None when testcontainers is installed and a Docker engine answers, else why not."""
    try:
        import docker  # testcontainers' own dependency
        import testcontainers  # noqa: F401
    except ImportError as exc:
        return f"--kafka-backend=testcontainers needs the testcontainers package (pip install testcontainers): {exc}"
    try:
        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # the docker SDK raises many kinds; any means "no engine"
        return f"--kafka-backend=testcontainers needs a running Docker engine, and none answered: {exc}"
    return None


class ContainerBroker(KafkaBroker):
    """Apache Kafka (Confluent's cp-kafka image, KRaft) in Docker through testcontainers."""

    mode = "testcontainers"

    def __init__(self, image: str = DEFAULT_CONTAINER_IMAGE) -> None:
        super().__init__()
        self.image = image
        self._container: Any = None

    def _no_faults(self, fault: str) -> BrokerFaultError:
        return BrokerFaultError(
            f"kafka_broker.{fault}() is not supported for the testcontainers backend; faults need "
            "--kafka-backend=broker_min (the default) in process mode."
        )

    def start(self, timeout: int = 120) -> None:
        """Pull and start the container (testcontainers waits until Kafka is up)."""
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers before its community/ split
            from testcontainers.kafka import KafkaContainer

        container = KafkaContainer(self.image).with_kraft()
        container.start(timeout=timeout)
        self._container = container
        self._bootstrap_servers = str(container.get_bootstrap_server())

    def log_text(self, since: int = 0) -> str:
        if self._container is None:
            return ""
        try:
            out, err = self._container.get_logs()
        except Exception:  # the container may be gone; the log is a courtesy
            return ""
        text: str = (out + err).decode(errors="replace")
        return text[since:]

    def log_size(self) -> int:
        return len(self.log_text())

    def close(self) -> None:
        if self._container is not None:
            self._container.stop()
            self._container = None
