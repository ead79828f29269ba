"""Hostile GEOPM reports: generated reports round-trip (checked against PyYAML too), and
truncated, empty, garbage or mangled files give clear errors naming the file, never exceptions,
and keep what is good."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job.geopm_report import collect_geopm_report
from hpcmon.post_job.geopm_report.model import Report, SessionReport
from hpcmon.post_job.geopm_report.reader import parse_report_file, parse_report_text
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.points import to_lines
from hpcmon.post_job.problems import MAX_PROBLEMS_PER_INPUT

DATA = Path(__file__).parents[1] / "data" / "geopm_report"
FIXTURES = sorted(p for p in DATA.iterdir() if p.name != "SOURCES.md")
FIXTURE_TEXT = {p.name: p.read_text() for p in FIXTURES}
FAKE = Path("/jobs/77/geopm.report")
JOB = JobContext("77")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_clear_errors(errors: list[str], name: str) -> None:
    """Every error names the file, and none is the parser's catch-all for its own bugs (which
    would otherwise let a crash pass as a "clear error")."""
    assert all(e.startswith(name) for e in errors), errors
    assert not any("internal error" in e for e in errors), errors


# ---------------------------------------------------------------- generated reports

KEYS = [
    "runtime (s)",
    "count",
    "sync-runtime (s)",
    "package-energy (J)",
    "dram-energy (J)",
    "power (W)",
    "frequency (%)",
    "frequency (Hz)",
    "time-hint-network (s)",
    "uncore-frequency (Hz)",
    "CPU_ENERGY@package-0",
    "CPU_FREQUENCY_STATUS@core-7",
]
numbers = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15)
values = st.dictionaries(st.sampled_from(KEYS), numbers, min_size=1, max_size=6)
names = st.text(
    st.characters(
        codec="utf-8", exclude_categories=["Cc", "Cs", "Zl", "Zp"], exclude_characters='"\\'
    ),
    min_size=1,
    max_size=20,
).map(str.strip)
host_names = st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True)
regions = st.lists(
    st.tuples(names.filter(bool), st.integers(0, 2**32 - 1), values),
    max_size=4,
    unique_by=lambda r: r[1],
)
hosts = st.dictionaries(host_names, st.tuples(regions, values, values), min_size=1, max_size=3)


def g6(value: float) -> str:
    """How GEOPM prints report values: 6 significant digits (``2.50273e+09``)."""
    return format(value, ".6g")


def render_yaml_report(report_hosts: dict, agent: str) -> str:
    lines = [
        "GEOPM Version: 3.1.0",
        "Start Time: Tue Mar 05 10:11:12 2024",
        'Profile: "generated"',
        f"Agent: {agent}",
        "Policy: {}",
        "",
        "Hosts:",
    ]
    for host, (host_regions, epoch, app) in report_hosts.items():
        lines.append(f"  {host}:")
        if host_regions:
            lines.append("    Regions:")
        for name, region_hash, region_values in host_regions:
            lines += ["    -", f'      region: "{name}"', f"      hash: 0x{region_hash:08x}"]
            lines += [f"      {k}: {g6(v)}" for k, v in region_values.items()]
        lines.append("    Epoch Totals:")
        lines += [f"      {k}: {g6(v)}" for k, v in epoch.items()]
        lines.append("    Application Totals:")
        lines += [f"      {k}: {g6(v)}" for k, v in app.items()]
    return "\n".join(lines) + "\n"


def rounded(mapping: dict[str, float]) -> dict[str, float]:
    return {k: float(g6(v)) for k, v in mapping.items()}


@SETTINGS
@given(report_hosts=hosts, agent=st.sampled_from(["monitor", "power_governor", "frequency_map"]))
def test_generated_yaml_report_round_trips(report_hosts: dict, agent: str) -> None:
    text = render_yaml_report(report_hosts, agent)
    result = parse_report_text(text, FAKE)
    assert result.errors == []
    [report] = result.reports
    assert isinstance(report, Report)
    assert report.agent == agent
    assert [h.name for h in report.hosts] == list(report_hosts)
    loaded = yaml.safe_load(text)  # the independent reading of the same text
    for host in report.hosts:
        host_regions, epoch, app = report_hosts[host.name]
        assert [(r.name, r.hash) for r in host.regions] == [
            (name, f"0x{h:08x}") for name, h, _ in host_regions
        ]
        for region, (_, _, region_values) in zip(host.regions, host_regions, strict=True):
            assert region.values == rounded(region_values)
        assert host.totals == {"epoch": rounded(epoch), "application": rounded(app)}
        assert {
            k: float(v) for k, v in loaded["Hosts"][host.name]["Application Totals"].items()
        } == host.totals["application"]


@SETTINGS
@given(report_hosts=hosts)
def test_generated_text_era_report_round_trips(report_hosts: dict) -> None:
    lines = [
        "##### geopm 1.1.0 #####",
        "Start Time: Tue Mar 05 10:11:12 2024",
        "Profile: generated",
        "Agent: monitor",
        "",
    ]
    for host, (host_regions, epoch, app) in report_hosts.items():
        lines.append(f"Host: {host}")
        for name, region_hash, region_values in host_regions:
            lines.append(f"Region {name} (0x{region_hash:016x}):")
            lines += [f"    {k.replace('(s)', '(sec)')}: {g6(v)}" for k, v in region_values.items()]
        lines.append("Epoch Totals:")
        lines += [f"    {k}: {g6(v)}" for k, v in epoch.items()]
        lines.append("Application Totals:")
        lines += [f"    {k}: {g6(v)}" for k, v in app.items()]
        lines.append("    geopmctl memory HWM: 2048 kB")
    result = parse_report_text("\n".join(lines) + "\n", FAKE)
    assert result.errors == []
    [report] = result.reports
    assert isinstance(report, Report)
    for host in report.hosts:
        host_regions, epoch, app = report_hosts[host.name]
        kept = [r for r in host_regions if r[0] != "unmarked-region"]
        assert [(r.name, r.hash) for r in host.regions] == [
            (name.strip(), f"0x{h:08x}") for name, h, _ in kept
        ]
        for region, (_, _, region_values) in zip(host.regions, kept, strict=True):
            assert region.values == {
                k.replace("(s)", "(sec)"): v for k, v in rounded(region_values).items()
            }
        assert host.totals["application"] == {**rounded(app), "geopmctl memory HWM (kB)": 2048}


# ---------------------------------------------------------------- damaged real files


def all_values(reports: list) -> list[tuple]:
    """Every value a parse produced, with where it sits, for comparing two parses."""
    out = []
    for report in reports:
        if isinstance(report, SessionReport):
            for signal in report.signals:
                out += [
                    (report.host, report.start_time_ns, signal.signal, k, v)
                    for k, v in signal.stats.items()
                ]
            continue
        for host in report.hosts:
            for index, region in enumerate(host.regions):
                out += [(host.name, index, region.name, k, v) for k, v in region.values.items()]
            for scope, totals in host.totals.items():
                out += [(host.name, scope, k, v) for k, v in totals.items()]
    return out


@SETTINGS
@given(name=st.sampled_from(sorted(FIXTURE_TEXT)), fraction=st.floats(0, 1))
def test_truncated_fixture_keeps_its_intact_values(name: str, fraction: float) -> None:
    text = FIXTURE_TEXT[name]
    cut = text[: int(len(text) * fraction)]
    full = set(all_values(parse_report_text(text, FAKE).reports))
    result = parse_report_text(cut, FAKE)
    assert_clear_errors(result.errors, str(FAKE))
    if not result.reports:
        assert result.errors
    # only the value cut in the middle of its digits may differ from the complete file
    assert len(set(all_values(result.reports)) - full) <= 1


@SETTINGS
@given(
    name=st.sampled_from(
        [n for n in sorted(FIXTURE_TEXT) if "Application Totals" in FIXTURE_TEXT[n]]
    ),
    data=st.data(),
)
def test_host_cut_before_its_application_totals_is_reported(name: str, data: st.DataObject) -> None:
    text = FIXTURE_TEXT[name]
    starts = [i for i in range(len(text)) if text.startswith("Application Totals", i)]
    totals = data.draw(st.sampled_from(starts))
    # somewhere after the host's previous section (or its name) began
    lower = (
        max(
            text.rfind(marker, 0, totals)
            for marker in ("Epoch Totals", "Unmarked Totals", "Hosts:", "Host:")
        )
        + 1
    )
    cut = text[: data.draw(st.integers(lower, totals))]
    result = parse_report_text(cut, FAKE)
    assert result.errors, "a host cut before its Application Totals must be reported"
    assert_clear_errors(result.errors, str(FAKE))


@SETTINGS
@given(data=st.binary(max_size=400))
def test_garbage_bytes_never_raise(data: bytes, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("garbage") / "job.report"
    path.write_bytes(data)
    result = parse_report_file(path)
    assert_clear_errors(result.errors, str(path))
    if not result.reports:
        assert result.errors


@SETTINGS
@given(
    prefix=st.sampled_from(
        [
            "GEOPM Version: 3.0\nHosts:\n",
            "##### geopm 1.0 #####\n",
            'host: "n1"\nmetrics:\n',
            '"host","sample-count"\n',
            "",
        ]
    ),
    body=st.text(max_size=300),
)
def test_garbage_after_a_real_header_never_raises(prefix: str, body: str) -> None:
    result = parse_report_text(prefix + body, FAKE)
    assert_clear_errors(result.errors, str(FAKE))
    output_lines = to_lines(p for r in result.reports for p in _points(r))
    assert "nan" not in output_lines.lower().replace("jobid", "")


def _points(record) -> list:
    from hpcmon.post_job.geopm_report.points import report_points, session_points

    if isinstance(record, Report):
        return report_points(record, JOB, 0)
    return session_points(record, JOB, 0)


@SETTINGS
@given(name=st.sampled_from(sorted(FIXTURE_TEXT)), data=st.data())
def test_mangled_lines_are_named_and_the_rest_is_kept(name: str, data: st.DataObject) -> None:
    lines = FIXTURE_TEXT[name].splitlines()
    index = data.draw(st.integers(0, len(lines) - 1))
    junk = data.draw(st.sampled_from(["%%%% garbage %%%%", "    : :", "\x00\x01", "-- - --"]))
    lines[index] = lines[index][: len(lines[index]) // 2] + junk
    result = parse_report_text("\n".join(lines), FAKE)
    assert_clear_errors(result.errors, str(FAKE))
    full = Counter(
        item[-2:] for item in all_values(parse_report_text(FIXTURE_TEXT[name], FAKE).reports)
    )
    kept = Counter(item[-2:] for item in all_values(result.reports))
    # (key, value) pairs: a mangled host or region name moves values but must not invent any
    assert (kept - full).total() <= 1


def test_empty_and_whitespace_reports(tmp_path: Path) -> None:
    for content in (b"", b"\n\n   \n"):
        path = tmp_path / "empty.report"
        path.write_bytes(content)
        result = parse_report_file(path)
        assert result.reports == []
        assert result.errors == [f"{path}: empty report"]


def test_not_a_report(tmp_path: Path) -> None:
    path = tmp_path / "darshan.txt"
    path.write_text("# darshan log version: 3.41\nPOSIX 0 123 POSIX_OPENS 4\n")
    [error] = parse_report_file(path).errors
    assert error.startswith(f"{path}: not a GEOPM report: unknown first line")
    assert "3.41" not in error and "POSIX" not in error  # the file's bytes are never quoted


def test_line_errors_carry_line_numbers() -> None:
    text = FIXTURE_TEXT["geopm-2.0.0+dev39x_test_sleep_region_report.yaml"]
    lines = text.splitlines()
    lines[14] = "      this line has no colon"
    result = parse_report_text("\n".join(lines), FAKE)
    assert result.errors == [f"{FAKE}:15: expected 'key: value'"]
    [report] = result.reports
    assert isinstance(report, Report)
    assert report.hosts[0].totals["application"]["runtime (s)"] == 33.9054


def test_truncated_csv_row_is_skipped_with_a_message() -> None:
    text = FIXTURE_TEXT["geopmsession_report_2025-05-16_report-samples-10.csv"]
    cut = text[: text.rindex(",") - 5]
    result = parse_report_text(cut, FAKE)
    assert len(result.reports) == 3
    [error] = result.errors
    assert error.startswith(f"{FAKE}:5: row has 12 columns, header has 13")


def test_huge_values_and_odd_host_names_stay_writable() -> None:
    text = (
        "GEOPM Version: 3.0\nStart Time: Tue Mar 05 10:11:12 2024\nAgent: monitor\n"
        "Hosts:\n  'node 1,=x\u00e9':\n    Application Totals:\n"
        "      runtime (s): 1e999\n      power (W): -1e308\n      count: nan\n"
        "      package-energy (J): 12\n"
    )
    result = parse_report_text(text, FAKE)
    assert result.errors == []
    [report] = result.reports
    assert isinstance(report, Report)
    assert report.hosts[0].name == "node 1,=x\u00e9"
    runtime = report.hosts[0].totals["application"]["runtime (s)"]
    assert isinstance(runtime, float) and math.isinf(runtime)
    line = to_lines(_points(report))
    assert "runtime_seconds" not in line and "count=" not in line
    assert "package_energy_joules=12" in line and r"host=node\ 1\,\=x" in line


def test_too_many_problems_are_capped() -> None:
    text = "GEOPM Version: 3.0\nHosts:\n  n1:\n" + "    ???\n" * 500
    errors = parse_report_text(text, FAKE).errors
    assert len(errors) == MAX_PROBLEMS_PER_INPUT + 1
    # 500 bad lines and the host's missing Application Totals: the rest in one line
    assert errors[-1].endswith(f"... and {501 - MAX_PROBLEMS_PER_INPUT} more problems")


def test_collect_never_raises_on_a_directory(tmp_path: Path) -> None:
    output = collect_geopm_report([tmp_path], JOB)
    assert output.points == []
    assert len(output.errors) == 1 and output.errors[0].startswith(str(tmp_path))


def test_session_document_cut_inside_its_statistics_is_reported() -> None:
    text = FIXTURE_TEXT["geopmsession_report_2024-08-14_single_host.yaml"]
    cut = text[: text.rindex("    mean:")]
    result = parse_report_text(cut, FAKE)
    [session] = result.reports
    assert isinstance(session, SessionReport)
    assert session.signals[-1].stats == {
        "count": 2001,
        "first": 1.69773e9,
        "last": 1.75341e9,
        "min": 1e9,
        "max": 2.49659e9,
    }
    assert result.errors == [
        f"{FAKE}: document at line 1: signal 3 lacks mean, std (truncated report?)"
    ]


@pytest.mark.parametrize("name", [n for n in sorted(FIXTURE_TEXT) if "\nhost: " in FIXTURE_TEXT[n]
                                  or FIXTURE_TEXT[n].startswith("host: ")])  # fmt: skip
def test_session_report_cut_inside_a_host_section_is_reported(name: str) -> None:
    """``host: `` with nothing after it (the file ends there): one clear line, never a silent
    exit 0 with fewer points."""
    text = FIXTURE_TEXT[name]
    starts = [i for i in range(len(text)) if text.startswith("host: ", i)]
    assert starts
    for start in starts:
        result = parse_report_text(text[: start + len("host: ")], FAKE)
        assert any("'host:' without a name" in error for error in result.errors), start
        assert_clear_errors(result.errors, str(FAKE))


@pytest.mark.parametrize("year", ["99999999999999999999", "3000", "1500"])
def test_a_start_time_no_store_can_hold_costs_only_the_time(year: str) -> None:
    # A year of 20 digits raised OverflowError (no ValueError): the whole report was lost;
    # years past 2262 gave times beyond int64 ns that no InfluxDB stores.
    text = render_yaml_report({"n1": ([], {"runtime (s)": 2.0}, {"runtime (s)": 3.0})}, "monitor")
    result = parse_report_text(text.replace(" 2024\n", f" {year}\n", 1), FAKE)
    [report] = result.reports
    assert isinstance(report, Report)
    assert report.start_time_ns is None and [h.name for h in report.hosts] == ["n1"]
    [error] = result.errors
    assert error.endswith(": unreadable Start Time (or not within 1677-2262, what InfluxDB stores)")
