"""The wheel is complete: built from a copy of the checkout, installed into a fresh venv,
and every module imported from there (not from the repository).

The venv sees the host's site-packages only as plain paths for the dependencies
(kio, crc32c, ...): the host's editable kafkakit hook is a .pth file there, and
.pth files inside an added path are not executed, so only the wheel provides kafkakit.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.slow  # builds a wheel and a venv: 10-30 s

REPO_ROOT = Path(__file__).resolve().parent.parent
# Source folder -> the package path it becomes in the wheel (see pyproject's package-dir).
SOURCE_TO_PACKAGE = {"client": "kafkakit", "broker_min": "kafkakit/broker", "spark": "kafkakit/spark"}
_COPY_IGNORE = shutil.ignore_patterns(
    ".git", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".venv", "venv",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
)  # fmt: skip

_IMPORT_EVERYTHING = r"""
import importlib, json, pkgutil, sys
import kafkakit
names = [m.name for m in pkgutil.walk_packages(kafkakit.__path__, "kafkakit.")]
failed = {}
for name in ["kafkakit", "kafkakit.broker", "kafkakit.spark", *names]:
    if name.rsplit(".", 1)[-1] == "__main__":
        continue  # importing a __main__ would run the program
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
files = {n: getattr(sys.modules.get(n), "__file__", None) for n in ("kafkakit", "kafkakit.broker", "kafkakit.spark")}
print(json.dumps({"modules": names, "failed": failed, "files": files}))
"""


def _wheel_paths_expected_from_sources(root: Path) -> set[str]:
    """Every .py file under client/, broker_min/, spark/ as the path it must have in the wheel."""
    expected = set()
    for source, package in SOURCE_TO_PACKAGE.items():
        for path in (root / source).rglob("*.py"):
            if "__pycache__" not in path.parts:
                expected.add(f"{package}/{path.relative_to(root / source).as_posix()}")
    return expected


def _build_requirements_installed() -> bool:
    """True when the host already has pyproject's build requirements (build offline then)."""
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for text in requires:
        requirement = Requirement(text)
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(installed, prereleases=True):
            return False
    return True


def _run(command: list[str], *, cwd: Path, timeout: float = 300) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout, so the build leaves nothing in the repo."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO_ROOT, source, ignore=_COPY_IGNORE, symlinks=True)
    out = work / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)]
    if _build_requirements_installed():
        command.insert(5, "--no-build-isolation")
    _run(command, cwd=work)
    (built,) = out.glob("kafkakit-*.whl")
    return built


@pytest.fixture(scope="module")
def venv_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with only the wheel installed, dependencies reachable from the host."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=venv
        ).strip()
    )
    host_paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "_host_dependencies.pth").write_text("".join(f"{p}\n" for p in host_paths))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        cwd=venv,
    )
    yield python


def test_wheel_holds_every_source_module_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    source_copy = wheel.parent.parent / "src"  # what the wheel was built from (see the fixture)
    missing = sorted(_wheel_paths_expected_from_sources(source_copy) - names)
    assert not missing, f"not in the wheel (is the sub-package listed in pyproject's packages?): {missing}"
    assert "kafkakit/py.typed" in names


def test_every_module_imports_from_the_installed_wheel(venv_python: Path, tmp_path: Path) -> None:
    report = json.loads(
        _run([str(venv_python), "-c", _IMPORT_EVERYTHING], cwd=tmp_path).strip().splitlines()[-1]
    )
    venv = venv_python.parent.parent
    for name, file in report["files"].items():
        assert file is not None and Path(file).is_relative_to(venv), (
            f"{name} imported from {file}, not the venv"
        )
    assert report["failed"] == {}, f"modules that fail to import from the wheel: {report['failed']}"
    assert {"kafkakit.protocol", "kafkakit.errors"} <= set(report["modules"])


def test_console_script_runs_from_the_venv(venv_python: Path, tmp_path: Path) -> None:
    script = venv_python.parent / "kafkakit-broker"
    assert script.is_file(), "pyproject's [project.scripts] kafkakit-broker was not installed"
    assert "--data-dir" in _run([str(script), "--help"], cwd=tmp_path)
