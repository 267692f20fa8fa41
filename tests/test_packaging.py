"""The package a user installs is the checkout: `python -m build` makes the sdist and, from it, the wheel
(as a release and `pip install` from the sdist would); the wheel holds every file under mlbench/, the
sdist the schemas, the manual and the example pipelines, and the installed wheel validates and plans
every pipeline in pipelines/ (the Core ML ones read chips.yaml, which the wheel once left out).

`.ci/run` also installs the wheel into a fresh virtual environment without extras and runs a Core ML
sweep from it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytest.importorskip("build", reason="`build` comes with the dev extra: pip install -e '.[dev]'")


def package_files() -> set[str]:
    """Every file under mlbench/ a wheel must carry: sources and data, not bytecode."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "mlbench").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}


def checkout_copy(dest: Path) -> Path:
    """The files git tracks or would track (the working tree, not ignored ones) copied to `dest`."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel built from that sdist)."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to know the project's files")
    root = tmp_path_factory.mktemp("packaging")
    source = checkout_copy(root / "src")
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(root / "dist"), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,) = (root / "dist").glob("*.tar.gz")
    (wheel,) = (root / "dist").glob("*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_the_wheel_holds_every_file_under_mlbench(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as archive:
        held = {name for name in archive.namelist() if name.startswith("mlbench/")}
    expected = package_files()
    assert {n for n in expected if not n.endswith(".py")} >= {"mlbench/backends/apple/chips.yaml"}
    assert sorted(expected - held) == [], "files under mlbench/ the wheel leaves out: declare them in pyproject.toml"
    assert sorted(held - expected) == []


@pytest.mark.slow
def test_the_sdist_holds_the_schemas_the_manual_and_the_pipelines(built):
    sdist, _ = built
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        held = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    wanted = {p.relative_to(ROOT).as_posix() for folder in ("schemas", "docs", "pipelines", "examples")
              for p in (ROOT / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {"schemas/pipeline.schema.json", "schemas/report.schema.json", "docs/pipeline.md"} <= wanted
    assert sorted(wanted - held) == []
    assert sorted(package_files() - held) == []
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in held)  # no half copy of either


@pytest.mark.slow
def test_the_installed_wheel_validates_and_plans_every_pipeline(built, tmp_path):
    """The wheel unpacked (a pure-Python wheel installs as its files) first on the path, so `mlbench`
    is the wheel's and not the checkout's; validate and plan need only the core dependencies."""
    _, wheel = built
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import mlbench; print(mlbench.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(site)
    pipelines = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert any(p.name == "coreml.yaml" for p in pipelines)
    for path in pipelines:
        for command in ("validate", "plan"):
            result = subprocess.run([sys.executable, "-m", "mlbench.cli", command, str(path)], env=env, cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, (command, path.name, result.stderr[-2000:])
            assert "Traceback" not in result.stderr
