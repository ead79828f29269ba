"""The real exporter process: never an HTTP 500 on hostile files, and a real Prometheus that
scrapes it sees the counter and rate values the files imply."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests import servers

pytestmark = pytest.mark.integration

DATA = Path(__file__).parents[1] / "data" / "jobstats"


class Exporter:
    def __init__(self, process: servers.ExporterProcess, path: Path) -> None:
        self.port, self.path = process.port, path
        self.url = f"http://{process.address}/metrics"


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> Iterator[Exporter]:
    workdir = tmp_path_factory.mktemp("jobstats-exporter")
    path = workdir / "job_stats.txt"
    path.write_text("")
    args = ["--jobstats.source=file", f"--jobstats.path={path}", "--jobstats.interval=0"]
    with servers.run_exporter(args, workdir) as process:
        yield Exporter(process, path)


def scrape(exporter: Exporter) -> dict[tuple[str, frozenset], float]:
    status, body = servers.http_get(exporter.url, timeout=30)
    assert status == 200, body[:500]
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body.decode("utf-8"))
        for s in family.samples
    }


BASES = [
    (DATA / name).read_text()
    for name in (
        "whamcloud_lustrefs-exporter__fixtures_jobstats_only_2.14.0_164.txt",
        "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt",
        "whamcloud_lustre-collector__src_oss_job_stats.rs__inline_test_with_time_triple.txt",
        "HewlettPackard_lustre_exporter__5f53b89__proc_fs_lustre_mdt_lustrefs-MDT0000_job_stats__"
        "pre2.10.txt",
    )
]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(base=st.sampled_from(range(len(BASES))), data=st.data())
def test_hostile_files_never_give_http_500(exporter: Exporter, base: int, data) -> None:
    text = BASES[base]
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(text)))
        junk = data.draw(
            st.sampled_from(
                [
                    "",
                    "\x00",
                    "{",
                    "}",
                    '"',
                    "\\x4",
                    ":",
                    "\n- job_id:",
                    "99999999999999999999999",
                    "-1",
                    "\xff",
                    "=",
                    " ",
                ]
            )
        )
        text = text[:at] + junk + text[at + data.draw(st.integers(0, 30)) :]
    text = text[: data.draw(st.integers(0, len(text)))]
    exporter.path.write_bytes(text.encode("utf-8", "surrogateescape"))
    found = scrape(exporter)
    assert ("lustre_jobstats_scrape_duration_seconds", frozenset()) in found
    assert all(value >= 0 for (name, _), value in found.items() if name.startswith("lustre_job_"))


def record(snapshot: float, written: int, opens: int) -> str:
    return (
        "obdfilter.fs-OST0003.job_stats=\njob_stats:\n"
        '- job_id:          "1234:1000:node\\x20a"\n'
        f"  snapshot_time:   {snapshot} secs.nsecs\n"
        "  start_time:      1000.0 secs.nsecs\n"
        f"  write_bytes:     {{ samples: {opens}, unit: bytes, min: 4096, max: 1048576, "
        f"sum: {written}, sumsq: 0, hist: {{ 4K: 1 }} }}\n"
        f"  open:            {{ samples: {opens}, unit: usecs, min: 2, max: 8, sum: 30, "
        "sumsq: 100 }\n"
    )


def test_prometheus_scrapes_counters_and_rates(exporter: Exporter, prometheus_factory) -> None:
    prom = prometheus_factory(
        [
            {
                "job_name": "hpcmon",
                "scrape_interval": "1s",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
            }
        ]
    )
    selector = '{job="hpcmon",jobid="1234:1000:node a",target="fs-OST0003",component="ost"}'
    exporter.path.write_text(record(1100.0, 1000, 10))
    wait_value(prom, f"lustre_job_write_bytes_total{selector}", 1000)
    exporter.path.write_text(record(1110.0, 6000, 60))
    wait_value(prom, f"lustre_job_write_bytes_total{selector}", 6000)
    # (6000 - 1000) B and (60 - 10) opens over the time between the exporter's two reads
    # (each read at a scrape), not over the 10 s between the records' snapshot_time; scrapes
    # of the unchanged file then say 0.
    (series,) = prom.query(f"lustre_job_write_bytes_total{selector}[10m]")
    times = [(float(value), at) for at, value in series["values"]]
    before = max(at for value, at in times if value == 1000)
    after = min(at for value, at in times if value == 6000)
    op_selector = selector[:-1] + ',operation="open"}'
    for expr, increase in (
        (f"max_over_time(lustre_job_write_bytes_per_second{selector}[10m])", 5000),
        (f"max_over_time(lustre_job_operations_per_second{op_selector}[10m])", 50),
    ):
        (found,) = prom.query(expr)
        # Prometheus stamps a scrape when it starts it, the exporter when the request arrives.
        assert float(found["value"][1]) == pytest.approx(increase / (after - before), rel=0.2)
    wait_value(prom, f"lustre_job_stats_total{op_selector}", 60)
    wait_value(prom, f"lustre_job_latency_seconds_total{op_selector}", 30e-6)
    wait_value(prom, 'lustre_jobstats_up{job="hpcmon",target="fs-OST0003"}', 1)
    wait_value(prom, 'hpcmon_exporter_collector_success{collector="jobstats"}', 1)


def wait_value(prom: servers.Prometheus, expr: str, expected: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        result = prom.query(expr)
        if result:
            seen = float(result[0]["value"][1])
            if seen == pytest.approx(expected):
                return
        time.sleep(0.3)
    raise AssertionError(f"{expr} = {seen}, expected {expected}; targets {prom.targets()}")
