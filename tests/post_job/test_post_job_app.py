"""The app and user tags and the app_run point: from the real hook on real Darshan logs, from
--app, and from the epilog's app: with SLURM_JOB_NAME."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.common.config import ConfigError
from hpcmon.post_job.app import (
    APP_RUN,
    UNSAFE,
    app_from_command_line,
    app_name_problem,
    darshan_app,
    epilog_app,
    with_io_score,
)
from hpcmon.post_job.epilog import run_epilog
from hpcmon.post_job.epilog_config import parse_config
from hpcmon.post_job.layout import INDEX
from hpcmon.post_job.points import Point
from hpcmon.post_job.slurm import SlurmJob
from tests.post_job.lineprotocol_parse import parse_line
from tests.post_job.test_post_job_epilog import slurm_env, write_config

ROOT = Path(__file__).resolve().parents[2]
HISTORY = ROOT / "tests/data/darshan-history"
LOGS = ROOT / "tests/data/darshan/logs"
OLD = HISTORY / "mpi-io-test-x86_64-3.0.0.darshan"  # exe /tmp/tmp//mpi-io-test -f ...
BIG = HISTORY / "treddy_mpi-io-test_id4373053_6-2-60198-9815401321915095332_1.darshan"
IOR = LOGS / "snyder_ior-POSIX_id1057716-202103_11-8-64415-6936117869459351096_1.darshan"


def hook(tmp_path: Path, *args: str) -> list[dict]:
    """The job's points as stored, but its job_index point (its user and app are fields)."""
    out = tmp_path / "job.lp"
    command = [sys.executable, "-m", "hpcmon.post_job", "--job-id", "7", *args, "--output", out]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    keys = ("measurement", "tags", "fields", "time")
    points = [
        dict(zip(keys, parse_line(line), strict=True)) for line in out.read_text().splitlines()
    ]
    return [p for p in points if p["measurement"] != INDEX]


@pytest.mark.parametrize(
    "command_line, app",
    [
        ("/opt/app/bin//mpi-io-test -f x", "mpi-io-test"),
        ("/opt/app/bin/mpi-io-test", "mpi-io-test"),
        ("mpi-io-test -i 4 -v", "mpi-io-test"),
        ("./src/ior -a POSIX", "ior"),
        ("", ""),
    ],
)
def test_app_is_the_executables_base_name(command_line: str, app: str) -> None:
    assert app_from_command_line(command_line) == app


def test_every_point_gets_app_and_user_and_one_app_run(tmp_path: Path) -> None:
    points = hook(tmp_path, "--user", "alice", "--darshan", str(OLD))
    assert points and all(p["tags"]["app"] == "mpi-io-test" for p in points)
    assert all(p["tags"]["user"] == "alice" for p in points)
    [job] = [p for p in points if p["measurement"] == "darshan_job"]
    [run] = [p for p in points if p["measurement"] == APP_RUN]
    assert run["tags"] == {"app": "mpi-io-test", "user": "alice"}
    assert run["fields"]["jobid"] == run["fields"]["job_id"] == "7"
    assert run["time"] == job["time"]
    assert run["fields"]["bytes_written"] == job["fields"]["total_bytes_written"]
    assert run["fields"]["bytes_read"] == job["fields"]["total_bytes_read"]
    assert run["fields"]["reads"] + run["fields"]["writes"] == (
        job["fields"]["total_reads"] + job["fields"]["total_writes"]
    )
    assert 0 < run["fields"]["metadata_time_share"] < 1
    assert "energy_joules" not in run["fields"]  # no GEOPM report
    report = tmp_path / "report.json"  # the report's summary of the same log: the same share
    command = [sys.executable, "-m", "hpcmon.report", "--job-id", "7", "--darshan", str(OLD)]
    command += ["--format", "json", "--output", str(report)]
    subprocess.run(command, cwd=ROOT, capture_output=True, check=True, timeout=300)
    summary = json.loads(report.read_text())["summary"]
    assert run["fields"]["metadata_time_share"] == pytest.approx(
        summary["metadata_time_share"], rel=1e-9
    )
    [scored] = [p for p in points if p["tags"].get("insight") == "job"]  # job_diagnosis
    assert run["fields"]["io_score"] == scored["fields"]["score"]


def test_io_score_is_given_to_an_app_run_without_one() -> None:
    """What the migration does to an older hook's points: the job's diagnosis score into its
    app_run point; a score already there stays; without a diagnosis, none."""
    tags = {"jobid": "7", "app": "a"}
    diagnosis = Point("job_diagnosis", {**tags, "insight": "job"}, {"score": 12.5}, 1)
    other = Point("job_diagnosis", {**tags, "insight": "small-reads"}, {"score": 3.0}, 1)
    older = Point(APP_RUN, dict(tags), {"bytes_read": 1.0}, 1)
    kept = Point(APP_RUN, dict(tags), {"io_score": 4.0}, 1)
    with_io_score([other, older, kept, diagnosis])
    assert (older.fields["io_score"], kept.fields["io_score"]) == (12.5, 4.0)
    alone = Point(APP_RUN, dict(tags), {"bytes_read": 1.0}, 1)
    assert with_io_score([other, alone]) == [other, alone] and "io_score" not in alone.fields


def test_app_flag_wins_and_logs_of_two_executables_take_the_one_moving_most(tmp_path) -> None:
    both = hook(tmp_path, "--darshan", str(OLD), str(IOR))
    jobs = [p for p in both if p["measurement"] == "darshan_job"]
    moved = {
        p["fields"]["exe"]: p["fields"]["total_bytes_read"] + p["fields"]["total_bytes_written"]
        for p in jobs
    }
    assert {p["tags"]["app"] for p in both} == {max(moved, key=lambda exe: moved[exe])}
    assert "user" not in both[0]["tags"]  # no --user: no user tag
    [run] = [p for p in both if p["measurement"] == APP_RUN]
    assert run["fields"]["logs"] == 2
    assert run["fields"]["bytes_written"] == sum(p["fields"]["total_bytes_written"] for p in jobs)
    named = hook(tmp_path, "--app", "my code v2", "--darshan", str(BIG))
    assert {p["tags"]["app"] for p in named} == {"my code v2"}


@pytest.mark.parametrize(
    "name", ["", "   ", "a\nb", "x" * 201, "it's", "a\\b", 'a"b', "a`b", "$user", "a/b"]
)
def test_bad_app_flag_is_a_usage_error(tmp_path: Path, name: str) -> None:
    command = [sys.executable, "-m", "hpcmon.post_job", "--job-id", "7", "--app", name]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("hpcmon-post-job: error: --app: the application name")


@given(st.text(max_size=300))
def test_any_name_is_accepted_or_refused_with_a_reason(name: str) -> None:
    problem = app_name_problem(name)
    assert problem is None or problem.startswith("the application name")
    if problem is None:
        assert name.strip() and len(name) <= 200 and not any(ord(c) < 32 for c in name)
        assert not set(name) & set(UNSAFE)  # nothing that ends or escapes '$app' in InfluxQL


def test_an_executable_with_unsafe_characters_is_made_harmless() -> None:
    """The executable is not chosen as a name: it is kept with _ for what would break queries."""
    exe = "/home/u/bin/it's\\a$b`c\"d\x01 -f x"
    job = Point("darshan_job", {}, {"exe": exe, "total_bytes_read": 1.0}, 0)
    app = darshan_app([job])
    assert app == "it_s_a_b_c_d_"
    assert app_name_problem(app) is None


def test_epilog_app_from_the_slurm_job_name(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.yaml",
        {
            "app": "{job_name}",
            "writers": {"output": str(tmp_path / "{jobid}.lp")},
            "sources": {"darshan": {"logs": str(OLD)}},
        },
    )
    assert run_epilog(config, environ=slurm_env(SLURM_JOB_NAME="wrf-large")) == 0
    lines = [line for line in (tmp_path / "4711.lp").read_text().splitlines() if ",app=" in line]
    assert lines and all(",app=wrf-large" in line and ",user=alice" in line for line in lines)
    assert run_epilog(config, environ=slurm_env()) == 0  # no job name: the executable
    lines = (tmp_path / "4711.lp").read_text().splitlines()
    assert all(",app=mpi-io-test" in line or 'app="mpi-io-test"' in line for line in lines)


def test_epilog_app_config_is_checked(caplog) -> None:
    job = SlurmJob("1", "u", None, None, None, "a\nb")
    assert epilog_app("{job_name}", job) is None  # control character: from Darshan instead
    caplog.clear()
    quoted = SlurmJob("1", "u", None, None, None, "x' OR 1=1 OR 'a")  # the user's own job name
    assert epilog_app("{job_name}", quoted) is None  # from Darshan, one warning
    [warning] = caplog.records
    assert "job=1 app: the application name holds one of" in warning.getMessage()
    with pytest.raises(ConfigError, match="app: the application name holds one of"):
        parse_config({"app": "code'{job_name}", "writers": {"output": "/x"}})
    assert epilog_app("code-{job_name}", SlurmJob("1", "u", None, None, None, "x")) == "code-x"
    assert epilog_app(None, job) is None
    assert parse_config({"app": "lammps", "writers": {"output": "/x"}}).app == "lammps"
    with pytest.raises(ConfigError, match="app: the only placeholder is {job_name}"):
        parse_config({"app": "{user}", "writers": {"output": "/x"}})
    with pytest.raises(ConfigError, match="app must be a non-empty string"):
        parse_config({"app": "", "writers": {"output": "/x"}})
