"""The post-job command line: flags, lazy sources, isolation of failures, exit status."""

from __future__ import annotations

import inspect
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hpcmon.post_job import sources
from hpcmon.post_job.cli import UsageError, build_parser, main, source_requests, writer_settings
from hpcmon.post_job.layout import stored_points
from hpcmon.post_job.lines import points_to_lines
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.points import Point, to_lines
from tests import servers

DATA = Path(__file__).parents[1] / "data" / "post_job_frame"
GEOPM_REPORT = DATA / "geopm-2.0.0+dev39x_test_sleep_report.yaml"


def write_source_module(directory: Path, name: str, body: str) -> str:
    """A small source package for frame tests (the frame must not care which source it runs)."""
    (directory / f"{name}.py").write_text(textwrap.dedent(body))
    return name


JSON_SOURCE = """
    import json
    from hpcmon.post_job.points import Point
    from hpcmon.post_job.model import SourceOutput

    def collect(paths, job, **options):
        out = SourceOutput()
        for path in paths:
            try:
                rows = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                out.errors.append(f"{path}: {exc}")
                continue
            for row in rows:
                out.points.append(Point(row["m"], {**job.base_tags(), **row.get("tags", {})},
                                        row["fields"], row.get("time")))
        return out
"""


@pytest.fixture
def json_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Route --geopm-report to a JSON-reading source; returns a directory for its inputs."""
    monkeypatch.syspath_prepend(str(tmp_path))
    name = write_source_module(tmp_path, "frame_json_source", JSON_SOURCE)
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "geopm_report", (name, "collect"))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    return inputs


# ---------------------------------------------------------------- usage
@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "--job-id is required"),
        (["--job-id", " "], "--job-id is required"),
        (["--job-id", "1", "--influx.url", "http://x"], "go together"),
        (["--job-id", "1", "--influx.v1-url", "http://x"], "go together"),
        (["--job-id", "1", "--influx.token-file", "/t"], "needs --influx.url"),
        (
            [
                "--job-id",
                "1",
                "--influx.url",
                "http://x",
                "--influx.org",
                "o",
                "--influx.bucket",
                "b",
                "--influx.token-file",
                "/nonexistent/token",
            ],
            "cannot read token file",
        ),
        (["flush", "--influx.v1-url", "http://x", "--influx.database", "d"], "needs --spool-dir"),
        (["flush", "--spool-dir", "/tmp/x"], "needs a server writer"),
        (
            [
                "flush",
                "--spool-dir",
                "/x",
                "--influx.v1-url",
                "http://h",
                "--influx.database",
                "d",
                "--output",
                "f.lp",
            ],
            "--output does not go with it",
        ),  # fmt: skip
        (["--job-id", "1", "--spool-dir", "/tmp/x"], "--spool-dir needs a server writer"),
        (
            ["--job-id", "1", "--influx.v1-url", "localhost:8086", "--influx.database", "d"],
            "not an http:// or https:// URL",
        ),  # fmt: skip
        (
            [
                "--job-id",
                "1",
                "--influx.url",
                "http://h:x",
                "--influx.org",
                "o",
                "--influx.bucket",
                "b",
            ],
            "not a valid URL",
        ),  # fmt: skip
        (["--job-id", "1", "--config", "c.yaml"], "go with --slurm-epilog"),
        (["--job-id", "1", "--strict"], "go with --slurm-epilog"),
        (["--slurm-epilog", "--strict"], "needs --config"),
        (["--slurm-epilog", "--strict", "--config", "c", "--job-id", "3"], "not --job-id"),
    ],
)
def test_bad_usage_is_one_line_and_status_2(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--job-id", "1", "--darshan.top-records", "0"], "integer up to 1e+07, not '0'"),
        (["--job-id", "1", "--recorder.top-files", "many"], "integer up to 1e+07, not 'many'"),
        (["--job-id", "1", "--time-limit", "nan"], "seconds in (0, 86400], not 'nan'"),
        (["--job-id", "1", "--darshan"], "expected at least one argument"),
        (["--job-id", "1", "--influx.bucke", "b"], "unrecognized arguments: --influx.bucke"),
        (["flush", "--job-id", "1"], "unrecognized arguments: --job-id"),
    ],
)
def test_argparse_errors_are_one_line_and_status_2(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ["--influx.token", "S3CRET"],
        ["--influx.token=S3CRET"],
        ["--influx.tok", "S3CRET"],  # no abbreviation of --influx.token-file either
        ["--influx.token-fil", "S3CRET"],
    ],
)
def test_token_is_never_a_flag_value_nor_echoed(argv, capsys) -> None:
    base = [
        "--job-id",
        "1",
        "--influx.url",
        "http://h",
        "--influx.org",
        "o",
        "--influx.bucket",
        "b",
    ]
    try:
        status = main([*base, *argv])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "S3CRET" not in err


def test_token_from_environment_or_file_and_credentials(tmp_path: Path) -> None:
    v2 = "--job-id 1 --influx.url http://h:8086 --influx.org o --influx.bucket b".split()
    v1 = "--influx.v1-url http://h:8086 --influx.database d".split()
    options = build_parser().parse_args([*v2, *v1])
    env = {"INFLUX_TOKEN": "from-env", "INFLUX_USERNAME": "u", "INFLUX_PASSWORD": "p"}
    settings = writer_settings(options, env)
    assert (settings.v2_token, settings.v1_username, settings.v1_password) == ("from-env", "u", "p")
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    options = build_parser().parse_args([*v2, "--influx.token-file", str(token_file)])
    settings = writer_settings(options, env)
    assert settings.v2_token == "from-file" and settings.v1_username is None
    token_file.write_text(" \n")
    with pytest.raises(UsageError, match="token file is empty"):
        writer_settings(options, env)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--slurm-epilog"], "needs --config"),
        (
            ["--slurm-epilog", "--config", "c.yaml", "--job-id", "3", "--output", "o.lp"],
            "not --job-id --output",
        ),  # fmt: skip
        (["--slurm-epilog", "--config", "c.yaml", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_epilog_mode_usage_errors_exit_0_unless_strict(argv, message, capsys) -> None:
    """Slurm drains a node whose epilog fails: bad usage there is logged, status 0."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 0 and len(err) == 1 and message in err[0], err


def test_flags_match_the_source_contract() -> None:
    """Every source call the flags build binds to the real entry's signature."""
    argv = (
        "--job-id 1 --darshan a.darshan b.darshan --darshan-text a.txt --signals-out s.txt "
        "--darshan.top-records 7 --recorder r --recorder.top-files 3 "
        "--recorder.per-rank-functions --viztracer v.json --viztracer-out c.json "
        "--viztracer.top-functions 4 --geopm-report g --darshan c.darshan"
    )
    options = build_parser().parse_args(argv.split())
    requests = {r.name: r for r in source_requests(options)}
    darshan_logs = [Path("a.darshan"), Path("b.darshan"), Path("c.darshan")]  # flag repeated
    assert requests["darshan"].inputs == (darshan_logs, [Path("a.txt")])
    assert requests["darshan"].options == {"top_records": 7, "signals_out": Path("s.txt")}
    assert requests["recorder"].options == {"top_files": 3, "per_rank_functions": True}
    assert requests["viztracer"].options == {"cleaned_out": Path("c.json"), "top_functions": 4}
    assert requests["geopm_report"].inputs == ([Path("g")],)
    for request in requests.values():
        entry = sources.load_entry(request.name)
        inspect.signature(entry).bind(*request.inputs, JobContext("1"), **request.options)


# ---------------------------------------------------------------- sources and isolation
def test_points_to_stdout_with_base_tags(json_source: Path, capsys) -> None:
    rows = [
        {"m": "demo", "tags": {"host": "n1"}, "fields": {"v": 1.5, "n": 3}, "time": 10},
        {"m": "demo", "fields": {"s": "a b"}, "time": 20},
    ]
    (json_source / "a.json").write_text(json.dumps(rows))
    assert (
        main(
            ["--job-id", "55", "--cluster", "alpha", "--geopm-report", str(json_source / "a.json")]
        )
        == 0
    )
    out = capsys.readouterr().out
    # stored layout (post_job/layout.py): the job id a field, each point at its second
    # (0) + the job's slot (55 x 10,000 ns) + its place in its series; then the job's index
    assert out == (
        'demo,cluster=alpha,host=n1 jobid="55",n=3i,v=1.5 550000\n'
        'demo,cluster=alpha jobid="55",s="a b" 550000\n'
        'job_index,bucket=055,cluster=alpha first=550000i,jobid="55",last=550000i,'
        'measurements="demo",points=2i 550000\n'
    )


def test_missing_or_broken_source_costs_only_itself(
    json_source: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    (json_source / "ok.json").write_text('[{"m": "ok", "fields": {"v": 1}, "time": 5}]')
    write_source_module(tmp_path, "frame_broken_at_import", 'raise RuntimeError("broken")')
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "darshan", ("frame_broken_at_import", "collect"))
    write_source_module(
        tmp_path,
        "frame_raising_source",
        """
        def collect(paths, job, **options):
            raise RuntimeError("boom: SECRET-bytes-of-a-file")
    """,
    )
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "recorder", ("frame_raising_source", "collect"))
    status = main(
        [
            "--job-id",
            "9",
            "--darshan",
            "x.darshan",
            "--recorder",
            "dir",
            "--geopm-report",
            str(json_source / "ok.json"),
            str(json_source / "missing.json"),
        ]
    )
    captured = capsys.readouterr()
    assert status == 1
    assert captured.out == (
        'ok jobid="9",v=1i 90000\n'
        'job_index,bucket=009 first=90000i,jobid="9",last=90000i,measurements="ok",'
        "points=1i 90000\n"
    )
    assert (
        "darshan: source not available: frame_broken_at_import cannot be imported: "
        "RuntimeError: broken" in captured.err
    )
    # the exception's type only: its message may quote the file (files.unexpected_error)
    assert "recorder: failed: unexpected error while reading (RuntimeError)" in captured.err
    assert "SECRET" not in captured.err and "boom" not in captured.err
    assert "geopm_report: " + str(json_source / "missing.json") in captured.err


def test_a_missing_library_ends_the_command_not_the_source(monkeypatch) -> None:
    """A library of the post-job extra that is not installed is not one source's problem: the
    command ends, and hpcmon.entry names the extra in one line (tests/test_install.py)."""
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "darshan", ("no_such_hpcmon_module", "collect"))
    with pytest.raises(ModuleNotFoundError):
        main(["--job-id", "9", "--darshan", "x.darshan"])


def test_untimed_and_unencodable_points() -> None:
    listed: dict[str, Any] = {"v": [1, 2]}  # a list is no field type
    points = [
        Point("a", {"jobid": "1"}, {"v": 1}, None),
        Point("b", {"jobid": "1"}, listed, 3),
        Point("c", {"jobid": "1"}, {"v": float("nan")}, 4),  # nothing left: skipped
        Point("d", {"jobid": "1"}, {"v": 2}, 5),
    ]
    lines, problems = points_to_lines(points, run_time_ns=99)
    assert lines == ["a,jobid=1 v=1i 99", "d,jobid=1 v=2i 5"]
    assert any("'b'" in p and "cannot encode" in p for p in problems)
    assert any("1 a point(s) had no timestamp" in p for p in problems)


def test_line_breaks_in_string_fields_are_escaped() -> None:
    point = Point("f", {"jobid": "1", "file": "a\nb"}, {"name": "x\r\ny", "n": 1}, 7)
    [line], problems = points_to_lines([point])
    assert problems == [] and "\n" not in line and "\r" not in line
    assert line == 'f,file=a\\nb,jobid=1 n=1i,name="x\\\\r\\\\ny" 7'
    assert point.fields["name"] == "x\r\ny"  # the source's point is left alone


def test_source_returning_wrong_type_is_an_error(monkeypatch, tmp_path) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    write_source_module(
        tmp_path,
        "frame_wrong_source",
        """
        def collect(paths, job):
            return [1, 2]
    """,
    )
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "geopm_report", ("frame_wrong_source", "collect"))
    output = sources.collect([sources.SourceRequest("geopm_report", ([],))], JobContext("1"))
    assert output.points == [] and output.errors == [
        "geopm_report: returned list, not SourceOutput"
    ]


# ---------------------------------------------------------------- writers from the CLI
@pytest.mark.integration
def test_real_geopm_report_to_file_and_influxdb1(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    from hpcmon.post_job.geopm_report import collect_geopm_report

    influxdb1.create_database("cli_geopm")
    output = tmp_path / "job.lp"
    status = main(
        [
            "--job-id",
            "31337",
            "--cluster",
            "c1",
            "--geopm-report",
            str(GEOPM_REPORT),
            "--output",
            str(output),
            "--influx.v1-url",
            influxdb1.url,
            "--influx.database",
            "cli_geopm",
        ]
    )
    assert status == 0
    job = JobContext("31337", "c1")
    expected: SourceOutput = collect_geopm_report([GEOPM_REPORT], job)
    expected.points = stored_points(expected.points, job)
    assert output.read_text() == to_lines(expected.points)
    # read back: the application totals of host mcfly1, numbers read off the report file
    series = influxdb1.series(
        "SELECT package_energy_joules, power_watts, runtime_seconds FROM geopm_totals "
        "WHERE jobid='31337' AND scope='application' AND host='mcfly1'",
        db="cli_geopm",
    )
    assert series[0]["values"][0][1:] == [988.304, 110.919, 8.9101]
    total = 0
    for measurement in sorted({p.measurement for p in expected.points}):
        rows = influxdb1.series(f'SELECT * FROM "{measurement}"', db="cli_geopm")
        total += sum(len(s["values"]) for s in rows)
    assert total == len(expected.points)


@pytest.mark.integration
def test_server_down_with_spool_is_success_without_is_failure(
    json_source: Path, tmp_path: Path, capsys
) -> None:
    (json_source / "p.json").write_text('[{"m": "x", "fields": {"v": 1}, "time": 5}]')
    with servers.run_influxdb1() as server:
        url = server.url
    base = [
        "--job-id",
        "3",
        "--geopm-report",
        str(json_source / "p.json"),
        "--influx.v1-url",
        url,
        "--influx.database",
        "d",
        "--influx.timeout",
        "2",
    ]
    assert main([*base, "--spool-dir", str(tmp_path / "spool")]) == 0
    assert len(list((tmp_path / "spool" / "influx-v1").glob("*.spool"))) == 1
    assert main(base) == 1
    assert "2 line(s) not written" in capsys.readouterr().err  # the point and the job's index


@pytest.mark.integration
def test_unusable_spool_dir_is_reported_not_raised(
    json_source: Path, tmp_path: Path, capsys
) -> None:
    (json_source / "p.json").write_text('[{"m": "x", "fields": {"v": 1}, "time": 5}]')
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with servers.run_influxdb1() as server:
        url = server.url
    status = main(["--job-id", "3", "--geopm-report", str(json_source / "p.json"),
                   "--influx.v1-url", url, "--influx.database", "d", "--influx.timeout", "2",
                   "--spool-dir", str(not_a_dir)])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1
    assert "cannot write (Not a directory); 2 line(s) sent without a spool" in err
    assert "2 lost" in err


def test_a_fifo_or_directory_given_as_input_is_one_line_never_a_hang(tmp_path: Path, capsys):
    fifo = tmp_path / "job.darshan"
    os.mkfifo(fifo)
    argv = ["--job-id", "1", "--darshan", str(fifo), "--darshan-text", str(fifo), str(tmp_path),
            "--viztracer", str(fifo), "--geopm-report", str(fifo), "--recorder", str(fifo),
            "--output", str(tmp_path / "out.lp"), "--time-limit", "20"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 6 and "Traceback" not in err
    assert sum("not a regular file" in line for line in errors) == 4


def test_internal_error_names_the_type_not_the_message(
    json_source: Path, monkeypatch, capsys
) -> None:
    """A bug's message may quote an input: the one line names only the exception's type."""
    from hpcmon.post_job import cli

    (json_source / "ok.json").write_text('[{"m": "ok", "fields": {"v": 1}, "time": 5}]')

    def broken(*args, **kwargs):
        raise ValueError("could not convert 'SECRET-bytes-of-a-file'")

    monkeypatch.setattr(cli, "run_job", broken)
    status = main(["--job-id", "9", "--geopm-report", str(json_source / "ok.json")])
    err = capsys.readouterr().err
    assert status == 1
    assert "job=9 internal error: ValueError" in err
    assert "SECRET" not in err


def test_flush_internal_error_is_one_line_too(tmp_path: Path, monkeypatch, capsys) -> None:
    from hpcmon.post_job import cli

    def broken(*args, **kwargs):
        raise ValueError("could not convert 'SECRET-bytes-of-a-spool'")

    monkeypatch.setattr(cli, "flush", broken)
    argv = ["flush", "--spool-dir", str(tmp_path), "--influx.v1-url", "http://127.0.0.1:9"]
    status = main([*argv, "--influx.database", "d"])
    err = capsys.readouterr().err
    assert status == 1
    assert "flush: internal error: ValueError" in err
    assert "SECRET" not in err and "Traceback" not in err


def test_a_file_swapped_for_a_fifo_after_its_check_is_refused_not_waited_for(
    tmp_path: Path, monkeypatch
) -> None:
    """A user owning the directory can put a FIFO where a checked file was: its open waited
    for a writer, and the hook hung until its time limit, losing every source's points."""
    from hpcmon.post_job import files
    from hpcmon.post_job.darshan import reader_pydarshan
    from hpcmon.post_job.problems import SourceError
    from hpcmon.post_job.recorder.reader import read_recorder_trace

    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    monkeypatch.setattr(files, "not_a_regular_file", lambda path: None)  # the check passed
    with pytest.raises(SourceError, match="not a regular file"):
        files.read_input(fifo, [])
    with pytest.raises(SourceError, match="not a regular file"):
        reader_pydarshan._open_report(fifo)  # what darshan-util would have opened
    trace = tmp_path / "recorder-trace"  # a Recorder trace's files are read the same way
    trace.mkdir()
    (trace / "VERSION").write_text("2.4.0\n")
    os.mkfifo(trace / "recorder.mt")
    with pytest.raises(SourceError, match="not a regular file"):
        read_recorder_trace(trace)
