"""CPUs this process may use: the affinity mask and the container's quota, not the host's count."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench import cpus
from mlbench.cpus import available_cpus, cgroup_cpu_limit
from tests.conftest import ROOT


def fake(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    (tmp_path / "proc-cgroup").write_text(proc)
    return root, tmp_path / "proc-cgroup"


@pytest.mark.parametrize(("proc", "files", "limit"), [
    ("0::/\n", {"cpu.max": "150000 100000"}, 1.5),                               # v2, own namespace
    ("0::/\n", {"cpu.max": "max 100000"}, None),                                 # v2, no quota
    ("0::/job.slice/mine\n", {"job.slice/mine/cpu.max": "200000 100000", "cpu.max": "max 100000"}, 2.0),
    ("0::/gone\n", {"cpu.max": "400000 100000"}, 4.0),                           # own folder unreadable: the root's
    ("3:cpu,cpuacct:/docker/abc\n", {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000",
                                     "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"}, 0.5),  # v1
    ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),      # v1, no quota
    ("", {}, None),                                                               # no cgroup at all
])
def test_cgroup_quota(tmp_path, proc, files, limit):
    root, proc_cgroup = fake(tmp_path, proc, files)
    assert cgroup_cpu_limit(root, proc_cgroup) == limit


def test_the_quota_caps_the_affinity_and_rounds_up(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    root, proc = fake(tmp_path, "0::/\n", {"cpu.max": "250000 100000"})
    assert available_cpus(root, proc) == 3
    root, proc = fake(tmp_path, "0::/\n", {"cpu.max": "10000 100000"})
    assert available_cpus(root, proc) == 1  # a tenth of a CPU still runs one process
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)
    root, proc = fake(tmp_path, "0::/\n", {"cpu.max": "max 100000"})
    assert available_cpus(root, proc) == 2


@pytest.mark.skipif(shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"), reason="needs taskset")
def test_a_process_pinned_to_one_cpu_plans_one_export_job_and_records_one_cpu():
    code = ("from mlbench.run.executors import default_jobs; from mlbench.machine import snapshot; "
            "s = snapshot(); print(default_jobs(), s['cpu_count'], s['cpu_count_host'])")
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=True).stdout.split()
    assert out[:2] == ["1", "1"] and int(out[2]) == os.cpu_count()


def test_without_affinity_support_the_host_count_is_used(monkeypatch, tmp_path):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    root, proc = fake(tmp_path, "", {})
    assert cpus.available_cpus(root, proc) == 6
