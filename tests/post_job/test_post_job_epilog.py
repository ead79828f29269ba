"""Slurm epilog mode: config validation, log discovery, exit status, time limit, the script."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.common.config import ConfigError
from hpcmon.post_job import epilog, epilog_config
from hpcmon.post_job.epilog import run_epilog
from hpcmon.post_job.epilog_config import parse_config
from hpcmon.post_job.patterns import MAX_DAYS, find_files, job_days
from hpcmon.post_job.slurm import SlurmJob, slurm_job
from tests import servers
from tests.post_job.test_post_job_frame import GEOPM_REPORT

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "slurm" / "post-job.example.yaml"
SCRIPT = REPO / "deploy" / "slurm" / "hpcmon-epilog.sh"
LP_FILE = {"output": "/nonexistent/{jobid}.lp"}


def local_epoch(year: int, month: int, day: int, hour: int, minute: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute).timestamp()


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def slurm_env(job_id: str = "4711", user: str = "alice", **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM") and "proxy" not in k.lower()
    }
    # the job runs as the tests do: the hook reads the files the test wrote as the user who
    # wrote them (test_post_job_privileges.py runs jobs of another user)
    env.update({"SLURM_JOB_ID": job_id, "SLURM_JOB_USER": user, "SLURM_JOB_UID": str(os.getuid())})
    env.update(extra)
    return env


# ---------------------------------------------------------------- config
def test_example_config_is_valid() -> None:
    config = epilog_config.load_config(EXAMPLE)
    assert config.spool_dir and config.writers["influx_v2"]["bucket"] == "jobs"
    assert {s.name for s in config.sources} == {"darshan", "recorder", "viztracer", "geopm_report"}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"time_limit_seconds": 0}, "time_limit_seconds must be a number of seconds in (0, 86400]"),
        ({"time_limit_seconds": "10"}, "time_limit_seconds must be a number of seconds"),
        ({"time_limit_seconds": 1e9}, "time_limit_seconds must be a number of seconds"),
        ({"strict": "yes"}, "strict must be true or false"),
        ({"colour": 1}, "unknown key(s) colour"),
        ({"col\nour": 1}, "unknown key(s) 'col\\nour'"),  # one line, whatever the key
        ({"sources": {"darshan": {}}}, "give at least one of logs, texts or logdir"),
        ({"sources": {"lustre": {"x": 1}}}, "unknown key(s) lustre"),
        ({"sources": {"geopm_report": {"reports": "/x/{jobid.__class__}"}}}, "not a plain name"),
        ({"sources": {"geopm_report": {"reports": "/x/{hostname}"}}}, "unknown placeholder"),
        ({"sources": {"geopm_report": {"reports": "/x/{"}}}, "bad pattern"),
        ({"sources": {"recorder": {"dirs": "/r", "top_files": 2.5}}}, "positive integer"),
        ({"writers": {"influx_v1": {"url": "http://x"}}}, "writers.influx_v1.database"),
        ({"writers": {"batch_size": -1}}, "batch_size must be a positive integer"),
        ({"writers": []}, "writers must be a mapping"),
        ({"time_limit_seconds": 1e308}, "in (0, 86400]"),
        ({"sources": {"geopm_report": {"reports": "/x/{day:999999999}"}}}, "wider than 64"),
        (
            {"writers": {"influx_v1": {"url": "influx:8086", "database": "d"}}},
            "writers.influx_v1.url: 'influx:8086' is not an http:// or https:// URL",
        ),
        ({"search_days": 0}, "search_days must be a positive integer up to 62"),
        ({"search_days": 1000}, "up to 62"),
        ({"sources": {"geopm_report": {"reports": "/r"}}}, "writers: give output, influx_v2"),
        ({"spool_dir": "/s", "writers": {"output": "/o.lp"}}, "spool_dir needs writers.influx"),
    ],
)
def test_bad_config_names_file_and_key(data, message, tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", data)
    with pytest.raises(ConfigError) as exc:
        epilog_config.load_config(path)
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)


config_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["{jobid}", "/a/{user}/*", "{", "{year:02d}"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "url",
                    "org",
                    "bucket",
                    "database",
                    "logs",
                    "reports",
                    "dirs",
                    "traces",
                    "logdir",
                    "top_files",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
config_maps = st.dictionaries(
    st.sampled_from(
        [
            "cluster",
            "time_limit_seconds",
            "strict",
            "log",
            "spool_dir",
            "writers",
            "sources",
            "other",
        ]
    ),
    config_values
    | st.fixed_dictionaries(
        {},
        optional={
            "geopm_report": config_values,
            "darshan": config_values,
            "influx_v2": config_values,
            "output": config_values,
        },
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(config_maps)
def test_any_config_mapping_gives_config_or_clear_error(data: dict) -> None:
    try:
        config = parse_config(data, "site.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("site.yaml")
        return
    assert config.time_limit > 0
    for source in config.sources:
        assert source.patterns and all(
            isinstance(p, str) for ps in source.patterns.values() for p in ps
        )


# ---------------------------------------------------------------- discovery
def test_slurm_environment() -> None:
    job = slurm_job(
        {
            "SLURM_JOB_ID": " 99 ",
            "SLURM_JOB_UID": "0",
            "SLURM_JOB_START_TIME": "1700000000",
            "SLURM_JOB_END_TIME": "garbage",
        }
    )
    assert job == SlurmJob("99", "root", "0", 1700000000.0, None)
    only_id = slurm_job({"SLURM_JOBID": "5"})
    assert only_id is not None and only_id.job_id == "5"
    assert slurm_job({}) is None


def test_job_days_span_start_to_end_or_today() -> None:
    job = SlurmJob("1", "u", None, local_epoch(2025, 12, 31, 23), local_epoch(2026, 1, 2, 1))
    assert job_days(job) == [dt.date(2025, 12, 31), dt.date(2026, 1, 1), dt.date(2026, 1, 2)]
    unknown = SlurmJob("1", "u", None, None, None)
    assert job_days(unknown, now=local_epoch(2026, 3, 1, 0, 30)) == [
        dt.date(2026, 2, 28),
        dt.date(2026, 3, 1),
    ]
    week = job_days(unknown, now=local_epoch(2026, 3, 1, 0, 30), search_days=7)
    assert week == [dt.date(2026, 2, 23) + dt.timedelta(days=k) for k in range(7)]
    long_job = SlurmJob("1", "u", None, local_epoch(2024, 1, 1, 0), local_epoch(2025, 1, 1, 0))
    days = job_days(long_job)
    assert len(days) == MAX_DAYS and days[-1] == dt.date(2025, 1, 1)


def test_darshan_layout_found_across_midnight(tmp_path: Path) -> None:
    logdir = tmp_path / "darshan-logs"
    wanted = [
        logdir / "2025/12/31/alice_a.out_id4711_12-31-86000-1.darshan",
        logdir / "2026/1/1/alice_b.out_id4711_1-1-60-2.darshan",
    ]
    unwanted = [
        logdir / "2026/1/1/alice_a.out_id47110_1-1-60-3.darshan",  # other job
        logdir / "2026/1/1/bob_a.out_id4711_1-1-60-4.darshan",  # other user
        logdir / "2026/1/3/alice_a.out_id4711_1-3-60-5.darshan",
    ]  # after the job
    for path in wanted + unwanted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    config = parse_config({"writers": LP_FILE, "sources": {"darshan": {"logdir": str(logdir)}}})
    job = SlurmJob(
        "4711", "alice", "1000", local_epoch(2025, 12, 31, 23, 50), local_epoch(2026, 1, 1, 0, 20)
    )
    [request] = epilog.source_requests(config, job)
    assert request.name == "darshan" and request.inputs == (wanted, [])


def test_glob_characters_in_slurm_values_are_literal(tmp_path: Path) -> None:
    (tmp_path / "abc.report").write_text("x")
    (tmp_path / "a*.report").write_text("x")
    job = SlurmJob("1", "a*", None, None, None)
    days = [dt.date(2026, 1, 1)]
    assert find_files([str(tmp_path / "{user}.report")], job, None, None, days) == [
        tmp_path / "a*.report"
    ]


# ---------------------------------------------------------------- whole runs
def geopm_config(tmp_path: Path, **extra) -> dict:
    reports = tmp_path / "geopm" / "4711"
    reports.mkdir(parents=True)
    (reports / "app.report").write_bytes(GEOPM_REPORT.read_bytes())
    data = {
        "cluster": "c9",
        "time_limit_seconds": 30,
        "sources": {"geopm_report": {"reports": str(tmp_path / "geopm/{jobid}/*.report")}},
    }
    data.update(extra)
    return data


@pytest.mark.integration
def test_epilog_run_writes_points_to_influxdb1(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    influxdb1.create_database("epilog")
    data = geopm_config(
        tmp_path,
        writers={
            "influx_v1": {"url": influxdb1.url, "database": "epilog"},
            "output": str(tmp_path / "lp" / "{cluster}-{jobid}.lp"),
        },
        spool_dir=str(tmp_path / "s"),
    )
    config = write_config(tmp_path / "post-job.yaml", data)
    assert run_epilog(config, environ=slurm_env()) == 0
    lines = (tmp_path / "lp" / "c9-4711.lp").read_text().splitlines()
    assert lines and all(",cluster=c9" in line for line in lines)
    assert all('jobid="4711"' in line or ",jobid=4711 " in line for line in lines)
    series = influxdb1.series(
        "SELECT power_watts FROM geopm_totals WHERE jobid='4711' AND scope='unmarked'", db="epilog"
    )
    assert series[0]["values"][0][1] == 110.919  # "power (W): 110.919" in the report


@pytest.mark.integration
def test_epilog_exit_status_server_down(tmp_path: Path) -> None:
    with servers.run_influxdb1() as server:
        url = server.url  # stopped when the block ends
    writers = {"influx_v1": {"url": url, "database": "d"}, "request_timeout_seconds": 2}
    spooled = write_config(
        tmp_path / "a.yaml",
        geopm_config(tmp_path, writers=writers, spool_dir=str(tmp_path / "spool")),
    )
    assert run_epilog(spooled, environ=slurm_env()) == 0
    assert len(list((tmp_path / "spool" / "influx-v1").glob("*.spool"))) == 1
    unspooled = write_config(
        tmp_path / "b.yaml", {**yaml.safe_load(spooled.read_text()), "spool_dir": None}
    )
    assert run_epilog(unspooled, environ=slurm_env()) == 0  # lost, but never fail the job
    assert run_epilog(unspooled, strict=True, environ=slurm_env()) == 1


def test_epilog_outside_slurm_and_bad_config(tmp_path: Path) -> None:
    good = write_config(tmp_path / "ok.yaml", {"writers": {"output": str(tmp_path / "x.lp")}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    assert run_epilog(good, environ=env) == 0
    assert run_epilog(good, strict=True, environ=env) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [unclosed\n")
    assert run_epilog(bad, environ=slurm_env()) == 0
    assert run_epilog(bad, strict=True, environ=slurm_env()) == 2
    assert run_epilog(tmp_path / "missing.yaml", strict=True, environ=slurm_env()) == 2


def test_search_days_find_logs_of_a_long_job_without_slurm_times(tmp_path: Path) -> None:
    """Darshan dates a log by the application's start; without SLURM_JOB_START_TIME the hook
    must look back as far as the config says."""
    log = tmp_path / "2026/2/25/alice_a.out_id4711_2-25-100-1.darshan"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"")
    job = SlurmJob("4711", "alice", "1000", None, None)
    now = local_epoch(2026, 3, 1, 8)
    default = parse_config({"writers": LP_FILE, "sources": {"darshan": {"logdir": str(tmp_path)}}})
    assert epilog.source_requests(default, job, now) == []  # today and yesterday only
    sources = {"darshan": {"logdir": str(tmp_path)}}
    week = parse_config({"search_days": 7, "writers": LP_FILE, "sources": sources})
    [request] = epilog.source_requests(week, job, now)
    assert request.inputs == ([log], [])


def test_unexpected_failure_still_exits_0(tmp_path: Path, monkeypatch, capsys) -> None:
    config = write_config(tmp_path / "c.yaml", {"writers": {"output": str(tmp_path / "x.lp")}})

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire: SECRET-bytes-of-a-file")

    monkeypatch.setattr(epilog, "run_job", broken)
    assert run_epilog(config, environ=slurm_env()) == 0
    assert run_epilog(config, strict=True, environ=slurm_env()) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "internal error" in line] == [
        f"hpcmon-post-job[{os.getpid()}]: ERROR internal error: RuntimeError"
    ] * 2  # the type only: a message may quote an input
    assert not [line for line in err if "SECRET" in line]


SLOW_SOURCE = """
import time

def collect(paths, job):
    time.sleep(120)
"""


@pytest.mark.slow  # waits out timeouts: not in `make check`
def test_time_limit_ends_a_stuck_run(tmp_path: Path) -> None:
    (tmp_path / "slow_source.py").write_text(SLOW_SOURCE)
    (tmp_path / "in.report").write_text("x")
    config = write_config(
        tmp_path / "c.yaml",
        {
            "time_limit_seconds": 2,
            "writers": {"output": str(tmp_path / "out.lp")},
            "sources": {"geopm_report": {"reports": str(tmp_path / "*.report")}},
        },
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import hpcmon.post_job.sources as s; s.SOURCE_ENTRIES['geopm_report'] = ('slow_source', "
        "'collect'); from hpcmon.post_job.cli import main; raise SystemExit(main(sys.argv[2:]))"
    )
    env = slurm_env(PYTHONPATH=str(REPO))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), "--slurm-epilog", "--config", str(config)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "time limit of 2" in proc.stderr
    assert elapsed < 20  # far below the source's 120 s sleep
    strict = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(tmp_path),
            "--slurm-epilog",
            "--strict",
            "--config",
            str(config),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert strict.returncode == 1


def test_epilog_script_runs_the_hook(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.yaml",
        geopm_config(tmp_path, writers={"output": str(tmp_path / "{jobid}.lp")}),
    )
    env = slurm_env(
        HPCMON_POST_JOB=str(REPO / ".venv" / "bin" / "hpcmon-post-job"),
        HPCMON_CONFIG=str(config),
        HPCMON_LOG_STDERR="1",
    )
    if not Path(env["HPCMON_POST_JOB"]).exists():
        pytest.skip("hpcmon-post-job console script not installed in .venv")
    proc = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "job=4711" in proc.stderr
    assert "geopm_totals,agent=monitor,cluster=c9" in (tmp_path / "4711.lp").read_text()
    env["HPCMON_CONFIG"] = str(tmp_path / "missing.yaml")
    skipped = subprocess.run(
        ["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert skipped.returncode == 0 and "skipped" in skipped.stderr


# ---------------------------------------------------------------- hostile environment and files
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SLURM_JOB_ID", "../secret/s"),
        ("SLURM_JOB_ID", "4711/../../x"),
        ("SLURM_JOB_ID", "47 11"),
        ("SLURM_JOB_ID", "4711\n"),
        ("SLURM_JOB_USER", "../alice"),
        ("SLURM_JOB_USER", "al/ice"),
        ("SLURM_JOB_UID", "-1"),
    ],
)
def test_values_from_slurm_that_are_not_ids_are_refused(
    tmp_path: Path, variable: str, value: str, capsys
) -> None:
    """SLURM_JOB_ID=../secret/s once wrote a file outside the output directory: any value
    that is not what Slurm sets is refused with one line, and nothing is written."""
    out = tmp_path / "out"
    out.mkdir()
    config = write_config(
        tmp_path / "c.yaml",
        {"writers": {"output": str(out / "{user}-{jobid}.lp")},
         "sources": {"geopm_report": {"reports": str(tmp_path / "none/*.report")}}},
    )  # fmt: skip
    env = {**slurm_env(), variable: value}
    if value.endswith("\n"):  # slurm_job_id strips blanks: the id would be fine
        env[variable] = value.strip() + "/x"
    assert run_epilog(config, strict=True, environ=env) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and variable in errors[0] and "Traceback" not in err
    assert list(tmp_path.rglob("*.lp")) == [] and not (tmp_path.parent / "secret").exists()


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30), st.text(max_size=20))
def test_any_slurm_job_id_or_user_is_valid_or_refused(job_id: str, user: str) -> None:
    from hpcmon.post_job.slurm import SlurmEnvironmentError, slurm_job

    try:
        job = slurm_job({"SLURM_JOB_ID": job_id, "SLURM_JOB_USER": user})
    except SlurmEnvironmentError as exc:
        assert "\n" not in str(exc)
        return
    if job is not None:
        assert job.job_id.isdigit() and "/" not in (job.user or "")


def test_non_utf8_config_is_one_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"cluster: caf\xe9\nwriters:\n  output: /tmp/x.lp\n")
    assert run_epilog(config, strict=True, environ=slurm_env()) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{config}: not UTF-8 text (byte 0xe9 on line 1)" in line


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_any_config_file_bytes_give_a_config_or_one_line(data: bytes) -> None:
    import tempfile

    from hpcmon.post_job.epilog_config import load_config

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "c.yaml"
        path.write_bytes(data)
        try:
            load_config(path)
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))


def test_cli_refuses_a_job_id_that_is_not_one(capsys) -> None:
    from hpcmon.post_job.cli import main

    assert main(["--job-id", "../secret/s", "--output", "/tmp/x.lp"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--job-id: '../secret/s' is not a job id" in line


name_text = st.text(
    alphabet=st.sampled_from(list("ab*?[]!-_. {}é")), min_size=1, max_size=10
).filter(lambda s: s.strip(". ") != "" and s not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(cluster=name_text, decoy=name_text)
def test_input_discovery_finds_exactly_the_files_of_the_job(cluster: str, decoy: str) -> None:
    """Whatever the cluster name holds (glob characters included), the pattern finds the
    job's files on each day of the job and nothing else."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        wanted = []
        for day in (1, 2):
            path = root / cluster / f"2026-1-{day}" / "alice_4711.report"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
            wanted.append(path)
        other = root / cluster / "2026-1-1" / "alice_4712.report"
        other.write_text("x")  # another job
        if decoy != cluster:
            stray = root / decoy / "2026-1-1" / "alice_4711.report"
            stray.parent.mkdir(parents=True, exist_ok=True)
            stray.write_text("x")  # another cluster's directory
        job = SlurmJob("4711", "alice", None, None, None)
        days = [dt.date(2026, 1, 1), dt.date(2026, 1, 2)]
        pattern = str(root) + "/{cluster}/{year}-{month}-{day}/{user}_{jobid}.report"
        assert find_files([pattern], job, cluster, None, days) == sorted(wanted)


def test_every_registry_option_is_a_flag_and_a_config_key_with_one_default(tmp_path) -> None:
    """post_job/options.py is the only place a typed setting is declared: its flag, its YAML
    key, its type and its default come from there."""
    from hpcmon.post_job.cli import build_parser
    from hpcmon.post_job.options import OPTIONS

    actions = {a.option_strings[0]: a for a in build_parser()._actions if a.option_strings}
    base = {"writers": {"output": str(tmp_path / "x.lp")}}
    for item in OPTIONS:
        if item.flag:
            assert actions[item.flag].dest == item.dest
            assert actions[item.flag].default in (item.default, False if item.kind == "bool" else 0)
        good = True if item.kind == "bool" else (2 if item.kind == "int" else 2.5)
        for value, ok in ((good, True), ("text", False), ([1], False)):
            data = json_copy(base)
            if item.section.startswith("sources."):
                source = item.section.split(".", 1)[1]
                inputs = {"darshan": "logs", "recorder": "dirs", "viztracer": "traces"}[source]
                data["sources"] = {source: {inputs: "/x/*", item.key: value}}
            elif item.section in ("writers", "slurm"):
                data.setdefault(item.section, {})[item.key] = value
            else:
                data[item.key] = value
            if ok:
                parse_config(data, "c.yaml")
            else:
                with pytest.raises(ConfigError, match=rf"{item.key} must be "):
                    parse_config(data, "c.yaml")


def json_copy(data: dict) -> dict:
    import json

    return json.loads(json.dumps(data))
