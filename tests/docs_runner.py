"""Run a guide page's code blocks, as the convention in AGENTS.md ("Issue 12 shared conventions") says.

A page gets a fresh broker_min child process (``python -m kafkakit.broker``) on
a free port and one temporary directory; its fenced blocks run in page order:

- ```` ```python ````: written to a file and run as ``python3 FILE`` (240 s, exit 0);
  with ``<!-- pytest -->`` above it, written to ``test_*.py`` and run with
  ``python3 -m pytest -q -p no:cacheprovider FILE``;
- ```` ```bash ````: run with ``bash -euo pipefail`` (the venv's bin first on PATH,
  so ``kafkakit`` and ``kafkakit-broker`` resolve);
- ```` ```text ````: output shown to the reader, not run;
- data blocks (toml, properties, ini, json, yaml): not run; with
  ``<!-- file: NAME -->`` above it, written to NAME before anything runs;
- ``<!-- not-run: reason -->`` above a block: not run, reported.

Page-level directives (anywhere on the page):

- ``<!-- broker: key=value ... -->``: ``--config key=value`` settings for the
  page's broker (shell-quoted words, so a value may contain spaces); a word
  starting with ``--`` is passed to the broker's command line as it is (e.g.
  ``'--add-scram=SCRAM-SHA-512=[name=alice,password=alice-secret]'``).
- ``<!-- pki -->``: before the broker starts, the page's directory gets a
  throw-away CA and certificates (tests/security_env.py ``Pki``): ``ca.pem``,
  ``broker-keystore.pem`` (key and chain for 127.0.0.1/localhost),
  ``client.pem``/``client.key`` (DN ``CN=kafkakit-client,O=kafkakit``).

In every block and broker setting, ``localhost:9092`` becomes the broker's
address, and any other ``localhost:NNNN`` named by the broker directive (extra
listeners) becomes ``127.0.0.1:<a free port>``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.brokers import api_versions, free_port

REPO = Path(__file__).resolve().parent.parent
#: Generous: a Spark block starts a JVM, which takes minutes on a loaded 2-core machine.
BLOCK_TIMEOUT = 240.0
BROKER_START_TIMEOUT = 30.0
MAIN_ADDRESS = "localhost:9092"

RUN_LANGUAGES = {"python", "bash"}
SHOWN_LANGUAGES = {"text"}
DATA_LANGUAGES = {"toml", "properties", "ini", "json", "yaml"}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*(?P<name>[\w-]+)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")
_LOCAL_ADDRESS = re.compile(r"localhost:(\d+)")


class GuideError(AssertionError):
    """A guide page broke the convention or one of its blocks failed."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    line: int  # 1-based line of the opening fence
    language: str
    code: str
    directives: dict[str, str]


@dataclass
class Page:
    """A parsed guide page: its blocks and page-level directives."""

    path: Path
    blocks: list[Block]
    broker_words: list[str] = field(default_factory=list)
    pki: bool = False


def parse_page(path: Path) -> Page:
    """Split a markdown page into its fenced blocks and directives; a bad directive or fence is a GuideError."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = Page(path=path, blocks=[])
    pending: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        directive = _DIRECTIVE.match(line)
        fence = _FENCE.match(line)
        if directive:
            name, arg = directive["name"], (directive["arg"] or "").strip()
            if name == "broker":
                page.broker_words.extend(shlex.split(arg))
            elif name == "pki":
                page.pki = True
            elif name in ("file", "not-run", "pytest"):
                pending[name] = arg
            # other HTML comments are prose for editors and are ignored
        elif fence:
            start = index + 1
            indent = len(fence["indent"])
            body: list[str] = []
            index += 1
            while index < len(lines) and lines[index].strip() != fence["fence"]:
                text = lines[index]
                body.append(text[indent:] if text[:indent].strip() == "" else text.lstrip())
                index += 1
            if index == len(lines):
                raise GuideError(f"{path.name}:{start}: unclosed code fence")
            page.blocks.append(Block(start, fence["lang"].lower(), "\n".join(body) + "\n", pending))
            pending = {}
        elif line.strip() and pending:
            raise GuideError(
                f"{path.name}:{index + 1}: directive {sorted(pending)} is not followed by a code block"
            )
        index += 1
    return page


def check_block(page: Page, block: Block) -> None:
    """The convention's rules for one block (language, directive combinations)."""
    where = f"{page.path.name}:{block.line}"
    known = RUN_LANGUAGES | SHOWN_LANGUAGES | DATA_LANGUAGES
    if block.language not in known:
        raise GuideError(f"{where}: code block language {block.language!r} is not one of {sorted(known)}")
    if "pytest" in block.directives and block.language != "python":
        raise GuideError(f"{where}: <!-- pytest --> applies to python blocks only")
    if "file" in block.directives:
        if block.language not in DATA_LANGUAGES:
            raise GuideError(
                f"{where}: <!-- file: NAME --> applies to data blocks ({sorted(DATA_LANGUAGES)})"
            )
        name = block.directives["file"]
        if not name or "/" in name or name.startswith("."):
            raise GuideError(f"{where}: <!-- file: NAME --> needs a plain file name, got {name!r}")
    if "not-run" in block.directives and not block.directives["not-run"]:
        raise GuideError(f"{where}: <!-- not-run: reason --> needs a reason")


@dataclass
class PageBroker:
    """The page's broker_min child process (cwd = the page's directory)."""

    directory: Path
    words: list[str]
    ports: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return self.ports[MAIN_ADDRESS]

    def command(self) -> list[str]:
        port = self.address.rpartition(":")[2]
        cmd = [sys.executable, "-m", "kafkakit.broker", "--data-dir", str(self.directory / ".broker-data")]
        cmd += ["--port", port]
        for word in self.words:
            word = substitute(word, self.ports)
            cmd += [word] if word.startswith("--") else ["--config", word]
        return cmd

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=self.directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + BROKER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise GuideError(
                    f"the page's broker exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                api_versions(self.address, timeout=2.0)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise GuideError(f"the page's broker did not answer on {self.address}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])


def substitute(text: str, ports: dict[str, str]) -> str:
    """Replace each ``localhost:NNNN`` the page's broker owns with its real address."""
    return _LOCAL_ADDRESS.sub(lambda m: ports.get(m.group(0), m.group(0)), text)


def allocate_ports(words: list[str]) -> dict[str, str]:
    """``localhost:9092`` and every other ``localhost:NNNN`` in the broker words -> a free local port."""
    names = {MAIN_ADDRESS} | {m.group(0) for word in words for m in _LOCAL_ADDRESS.finditer(word)}
    return {name: f"127.0.0.1:{free_port()}" for name in sorted(names)}


def block_env() -> dict[str, str]:
    """The environment of every block: the interpreter's scripts directory first on PATH."""
    scripts = sysconfig.get_path("scripts")
    bin_dirs = [scripts, str(Path(sys.executable).parent)]
    path = os.pathsep.join([*dict.fromkeys(bin_dirs), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PATH=path, PYTHONUNBUFFERED="1")
    return env


@dataclass(frozen=True)
class PageReport:
    """What ran: (line, language) of each block run, and the not-run blocks with their reasons."""

    ran: list[tuple[int, str]]
    not_run: list[tuple[int, str]]


def run_page(path: Path, workdir: Path) -> PageReport:
    """Run every block of the guide ``path`` in ``workdir``; raises GuideError naming the failing block."""
    page = parse_page(path)
    for block in page.blocks:
        check_block(page, block)
    workdir.mkdir(parents=True, exist_ok=True)
    ports = allocate_ports(page.broker_words)
    if page.pki:
        from tests.security_env import Pki

        Pki.create(workdir)
    for block in page.blocks:
        if "file" in block.directives:
            (workdir / block.directives["file"]).write_text(substitute(block.code, ports))
    broker = PageBroker(workdir, page.broker_words, ports, workdir.parent / f"{workdir.name}.broker.log")
    broker.start()
    ran: list[tuple[int, str]] = []
    not_run: list[tuple[int, str]] = []
    try:
        for number, block in enumerate(page.blocks, 1):
            if "not-run" in block.directives:
                not_run.append((block.line, block.directives["not-run"]))
                continue
            if block.language not in RUN_LANGUAGES:
                continue
            _run_block(page, number, block, workdir, broker)
            ran.append((block.line, block.language))
    finally:
        broker.stop()
    return PageReport(ran, not_run)


def _run_block(page: Page, number: int, block: Block, workdir: Path, broker: PageBroker) -> None:
    code = substitute(block.code, broker.ports)
    stem = f"block_{number:02d}_line{block.line}"
    if block.language == "bash":
        script = workdir / f"{stem}.sh"
        cmd = ["bash", "-euo", "pipefail", script.name]
    elif "pytest" in block.directives:
        script = workdir / f"test_{stem}.py"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
    else:
        script = workdir / f"{stem}.py"
        cmd = [sys.executable, script.name]
    script.write_text(code)
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd,
            cwd=workdir,
            env=block_env(),
            capture_output=True,
            timeout=BLOCK_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise GuideError(
            _failure(page, block, f"timed out after {BLOCK_TIMEOUT:.0f} s", exc.stdout, exc.stderr, broker)
        ) from None
    if done.returncode != 0:
        what = f"exited with status {done.returncode} after {time.monotonic() - started:.1f} s"
        raise GuideError(_failure(page, block, what, done.stdout, done.stderr, broker))


def _failure(
    page: Page,
    block: Block,
    what: str,
    stdout: bytes | str | None,
    stderr: bytes | str | None,
    broker: PageBroker,
) -> str:
    def text(data: bytes | str | None) -> str:
        if data is None:
            return ""
        value = data.decode(errors="replace") if isinstance(data, bytes) else data
        return "\n".join(value.splitlines()[-40:])

    return (
        f"{page.path.name}, {block.language} block at line {block.line} {what}\n"
        f"--- block ---\n{block.code}"
        f"--- stdout (tail) ---\n{text(stdout)}\n"
        f"--- stderr (tail) ---\n{text(stderr)}\n"
        f"--- broker log (tail) ---\n{broker.log_tail()}"
    )


def nav_section(section: str, config: Path = REPO / "mkdocs.yml") -> list[str]:
    """The docs_dir-relative pages listed under ``section`` in the mkdocs nav, in order."""
    import yaml

    nav = yaml.safe_load(config.read_text())["nav"]
    for entry in nav:
        if isinstance(entry, dict) and section in entry:
            return list(_pages(entry[section]))
    raise GuideError(f"mkdocs.yml nav has no {section!r} section")


def nav_pages(config: Path = REPO / "mkdocs.yml") -> list[str]:
    """Every page in the mkdocs nav."""
    import yaml

    return list(_pages(yaml.safe_load(config.read_text())["nav"]))


def _pages(node: object) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _pages(value)
