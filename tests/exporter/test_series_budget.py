"""The series budget (``hpcmon-exporter --print-series-budget``) against the real exporter: job
stats generated at three sizes, the exporter run on them with the flags of each case, its
series counted in what it serves, and the formula's count for the same shape compared exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.servers import REPO_ROOT, http_get, run_exporter
from tests.exporter.jobstats_synth import write_server

# Slow (runs the exporter's processes and scrapes them): not in `make check`.
pytestmark = pytest.mark.slow

SIZES = {"small": (1, 7), "medium": (3, 120), "large": (6, 900)}  # (targets, jobs per target)
FLAG_SETS = {
    "default": [],
    "top-deny-some-rates": [
        "--jobstats.top-jobs=25",
        "--jobstats.operations-deny=statfs,get_info,set_info,quotactl",
        "--jobstats.rates=read_bytes,write_bytes",
    ],
    "server-allow": [
        "--jobstats.aggregate=server",
        "--jobstats.operations=read_bytes,write_bytes,open,getattr,punch",
    ],
    "max-jobs-no-rates": ["--jobstats.max-jobs=50", "--no-jobstats.rates"],
}


def exposition_series(body: bytes) -> int:
    """Samples in the exposition, each checked to parse."""
    count = sum(len(family.samples) for family in text_string_to_metric_families(body.decode()))
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    assert count == len(lines)
    return count


def budget(*flags: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "hpcmon.exporter", "--print-series-budget", "--site.json", *flags],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("flags", FLAG_SETS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("component", ["ost", "mdt"])
def test_budget_equals_measured_series(tmp_path, component: str, size: str, flags: str) -> None:
    targets, jobs = SIZES[size]
    if component == "mdt" and size == "large":
        targets = 2  # MDS servers carry few MDTs
    osts, mdts = (targets, 0) if component == "ost" else (0, targets)
    write_server(tmp_path / "jobstats", osts, mdts, jobs)
    args = [
        "--jobstats.source=file",
        f"--jobstats.path={tmp_path / 'jobstats' / '*.txt'}",
        "--jobstats.interval=0",
        *FLAG_SETS[flags],
    ]
    with run_exporter(args, tmp_path) as exporter:
        status, body = http_get(f"http://{exporter.address}/metrics", timeout=60)
    assert status == 200
    measured = exposition_series(body)
    shape = (
        ["--site.oss=1", f"--site.osts={osts}"]
        if component == "ost"
        else ["--site.mds=1", f"--site.mdts={mdts}"]
    )
    found = budget(
        *shape, f"--site.jobs-per-target={jobs}", "--site.source=file", *FLAG_SETS[flags]
    )
    assert found["oss_exporter" if component == "ost" else "mds_exporter"] == measured
    # The site adds what Prometheus records for each scrape (up, scrape_*: 5 series).
    assert found["site"] == measured + 5


def test_budget_scales_with_the_site_and_names_its_memory_cost() -> None:
    small = budget("--site.osts=8", "--site.oss=4", "--site.jobs-per-target=100")
    double = budget("--site.osts=16", "--site.oss=8", "--site.jobs-per-target=100")
    assert double["site"] == 2 * small["site"]
    assert small["prometheus_memory_bytes"] == small["site"] * 2048
    text = subprocess.run(
        [sys.executable, "-m", "hpcmon.exporter", "--print-series-budget", "--site.osts=8",
         "--site.oss=4", "--site.jobs-per-target=100", "--site.power-nodes=10"],
        capture_output=True, text=True, cwd=REPO_ROOT, check=True,
    ).stdout  # fmt: skip
    assert "per OSS exporter" in text and "GiB (2048 B per series)" in text


def test_budget_bad_flag_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hpcmon.exporter", "--print-series-budget", "--site.osts=-3"],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--site.osts" in result.stderr


@pytest.mark.parametrize(("sockets", "jobs"), [(1, 1), (2, 3), (4, 0)])
def test_budget_of_a_compute_node_equals_measured(tmp_path, sockets: int, jobs: int) -> None:
    """The real exporter on a powercap tree (a package and a dram zone per socket, psys for
    the board) and a Slurm prolog's jobs directory, against --site.power-nodes=1."""
    from tests.exporter.test_geopm_helpers import write_zone

    sysfs = tmp_path / "sys"
    for socket in range(sockets):
        write_zone(sysfs, str(socket), f"package-{socket}", 1000 + socket)
        write_zone(sysfs, f"{socket}:0", "dram", 500 + socket)
    write_zone(sysfs, str(sockets), "psys", 9000)
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    for number in range(jobs):
        (jobs_dir / f"{100 + number}").write_text(f"SLURM_JOB_UID={1000 + number}\n")
    args = [
        "--no-collector.jobstats", "--collector.geopm", "--geopm.backend=powercap",
        f"--path.sysfs={sysfs}", "--collector.jobs", f"--jobs.dir={jobs_dir}",
    ]  # fmt: skip
    with run_exporter(args, tmp_path) as exporter:
        deadline = time.monotonic() + 60
        before = -1
        while True:  # power comes from the second energy sample (1 s interval), zone by zone
            status, body = http_get(f"http://{exporter.address}/metrics", timeout=60)
            settled = b"geopm_board_power_watts{" in body and exposition_series(body) == before
            if settled or time.monotonic() > deadline:
                break
            before = exposition_series(body) if b"geopm_board_power_watts{" in body else -1
            time.sleep(1.2)
    assert status == 200 and b"geopm_board_power_watts{" in body
    found = budget(
        "--site.power-nodes=1", f"--site.sockets-per-node={sockets}", f"--site.jobs-per-node={jobs}"
    )
    assert found["node_exporter"] == exposition_series(body)
    assert found["site"] == exposition_series(body) + 5
