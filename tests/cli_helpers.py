"""Running the ``kafkakit`` command as a real child process in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def kafkakit(
    *args: str, input: str | bytes | None = None, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m kafkakit.cli ARGS`` with text output captured (bytes ``input`` is sent as is)."""
    full_env = {k: v for k, v in os.environ.items() if k != "KAFKAKIT_BOOTSTRAP_SERVERS"}
    full_env.update(env or {})
    data = input.decode() if isinstance(input, bytes) else input
    return subprocess.run(
        [sys.executable, "-m", "kafkakit.cli", *args],
        input=data if data is not None else "",
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a run that must have succeeded (stderr shown when it did not)."""
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result.stdout


def kafkakit_many(
    runs: list[tuple[str, ...]], *, input: str = "", timeout: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Several ``kafkakit`` runs at once (independent commands; saves the interpreter start-ups)."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKAKIT_BOOTSTRAP_SERVERS"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "kafkakit.cli", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args in runs
    ]
    results = []
    for args, proc in zip(runs, procs, strict=True):
        out, err = proc.communicate(input, timeout=timeout)
        results.append(subprocess.CompletedProcess([*args], proc.returncode, out, err))
    return results
