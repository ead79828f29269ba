"""geopmsession backend: the CSV trace parser on recorded traces, and the child process
(stdin requests, -p/-t, restart with backoff) through a stand-in executable that follows
geopmsession's real formats."""

from __future__ import annotations

import math
import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.exporter.geopm.geopmsession_backend import (
    RUN_SECONDS,
    GeopmsessionBackend,
    TraceParser,
    parse_header,
    parse_row,
    samples_from_row,
)
from hpcmon.exporter.geopm.model import BackendError, Request, SampleBatch, SignalKey
from hpcmon.exporter.geopm.sampler import CounterTracker, Sampler, readings_from_batch
from tests.exporter.test_geopm_helpers import DATA, SESSION_STANDIN

TRACES = DATA / "traces"


def parse_file(path: Path, delimiter: str = ",") -> tuple[TraceParser, list[list[float]]]:
    parser = TraceParser(delimiter)
    rows = []
    for line in path.read_text().splitlines(keepends=True):
        values, problems = parser.feed(line)
        assert problems == []
        if values is not None:
            rows.append(values)
    return parser, rows


def test_package_star_trace() -> None:
    parser, rows = parse_file(TRACES / "geopmsession_trace_2025_package-star.csv")
    assert parser.keys == [
        SignalKey("TIME", "board", 0),
        SignalKey("CPU_FREQUENCY_STATUS", "package", 0),
        SignalKey("CPU_FREQUENCY_STATUS", "package", 1),
        SignalKey("CPU_ENERGY", "package", 0),
        SignalKey("CPU_ENERGY", "package", 1),
    ]
    assert rows == [[0.658525605, 1e9, 1.105e9, 51985.06903076172, 216490.1282958984]]
    samples = samples_from_row(parser.keys, rows[0])  # TIME is the clock, not a metric
    assert [(s.key.signal, s.monotone, s.unit) for s in samples] == [
        ("CPU_FREQUENCY_STATUS", False, "hertz"),
        ("CPU_FREQUENCY_STATUS", False, "hertz"),
        ("CPU_ENERGY", True, "joules"),
        ("CPU_ENERGY", True, "joules"),
    ]


def test_cpu_power_trace_one_column_seven_rows() -> None:
    parser, rows = parse_file(TRACES / "geopmsession_trace_2025_cpu_power_package0_p1.csv")
    assert parser.keys == [SignalKey("CPU_POWER", "package", 0)]
    assert len(rows) == 7
    assert rows[0] == [62.54857725485511] and rows[-1] == [58.25752970206295]


# geopmsession.1.rst's one-line example without header, its values read off the file.
NO_HEADER_LINE = (TRACES / "geopmsession_trace_2024_no-header.csv").read_text()
NO_HEADER_VALUES = [70.250978379, 2434090909.090909, 2775e6, 198575.8842163086, 88752.19470214844]


def test_no_header_row() -> None:
    line = NO_HEADER_LINE
    values, problems = parse_row(line, 5)
    assert problems == []
    assert values == NO_HEADER_VALUES
    assert parse_row(line, 4)[0] == [] and "5 fields" in parse_row(line, 4)[1][0]


NO_HEADER_KEYS = [  # the requests of that example, in order (geopmsession.1.rst)
    SignalKey("TIME", "board", 0),
    SignalKey("CPU_FREQUENCY_STATUS", "package", 0),
    SignalKey("CPU_FREQUENCY_STATUS", "package", 1),
    SignalKey("CPU_ENERGY", "package", 0),
    SignalKey("CPU_ENERGY", "package", 1),
]


def test_no_header_trace_is_not_taken_for_a_header() -> None:
    values, problems = TraceParser().feed(NO_HEADER_LINE)
    assert values is None and "no header line" in problems[0]
    parser = TraceParser(expected=NO_HEADER_KEYS)
    values, problems = parser.feed(NO_HEADER_LINE)
    assert problems == [] and parser.keys == NO_HEADER_KEYS
    assert values == NO_HEADER_VALUES


def test_hex_too_large_for_a_double_is_reported_not_raised() -> None:
    values, problems = parse_row("0x" + "f" * 300 + ",1\n", 2)
    assert math.isnan(values[0]) and values[1] == 1.0
    assert len(problems) == 1 and "field 1" in problems[0]


def test_geopm_1_trace_pipe_delimited_nan_first_and_hex() -> None:
    """GEOPM 1.0 runtime trace: '|' delimiter, comment lines, NaN first power, hex hashes."""
    parser, rows = parse_file(
        TRACES / "geopm-1.0.0+dev209_test_trace_runtimes_first13lines.trace", "|"
    )
    assert len(rows) == 12 and len(parser.keys) == 16
    column = {key.signal: i for i, key in enumerate(parser.keys)}
    assert math.isnan(rows[0][column["POWER_PACKAGE"]])
    assert rows[1][column["POWER_PACKAGE"]] == 273.4682762313778
    assert rows[0][column["REGION_HASH"]] == 0x725E8066
    tracker = CounterTracker()
    batch = SampleBatch("geopmsession", rows[0][0], 0, samples_from_row(parser.keys, rows[0]))
    first = {r.key.signal: r.value for r in readings_from_batch(batch, tracker)}
    assert "POWER_PACKAGE" not in first  # NaN first sample of a derivative: not exposed
    assert first["ENERGY_PACKAGE"] == 242598.262512207


def test_header_rejects_duplicates_and_blank() -> None:
    with pytest.raises(ValueError):
        parse_header('"A","A"')
    with pytest.raises(ValueError):
        parse_header("  \n")
    assert parse_header('"GPU_POWER-gpu-7","X-bogus-1"') == [
        SignalKey("GPU_POWER", "gpu", 7),
        SignalKey("X-bogus-1", "board", 0),
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=6))
def test_parser_never_raises(lines: list[str]) -> None:
    parser = TraceParser()
    for line in ['"TIME","CPU_ENERGY-package-0"\n', *lines]:
        values, problems = parser.feed(line)
        assert values is None or len(values) == 2
        assert all(isinstance(p, str) for p in problems)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet='"0123456789.,-_abcxnAPU\r\n#', max_size=40), max_size=5))
def test_parser_without_header_never_raises(lines: list[str]) -> None:
    """Hostile first lines never raise, and a row always has the width of the columns."""
    parser = TraceParser(expected=[SignalKey("TIME", "board", 0), SignalKey("X", "gpu", 1)])
    for line in lines:
        values, problems = parser.feed(line)
        assert values is None or len(values) == len(parser.keys)
        assert all(isinstance(p, str) for p in problems)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True),
            st.integers(0, 2**1100).map(hex),
            st.text(alphabet="0123456789.e-+xna", max_size=12),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_row_values_round_trip_or_are_reported(fields: list) -> None:
    line = ",".join(repr(f) if isinstance(f, float) else str(f) for f in fields)
    values, problems = parse_row(line + "\n", len(fields))
    assert len(values) == len(fields)
    for field, value in zip(fields, values, strict=True):
        if isinstance(field, float) and not math.isnan(field):
            assert value == field
        elif isinstance(field, str) and re.fullmatch("0x[0-9a-f]+", field):
            try:
                expected = float(int(field, 16))
            except OverflowError:  # beyond a double: reported, not raised
                assert math.isnan(value)
            else:
                assert value == expected
    assert len(problems) == sum(math.isnan(v) for v in values) - sum(
        isinstance(f, float) and math.isnan(f) or str(f).lower() in ("nan", "+nan", "-nan")
        for f in fields
    )


# ---------------------------------------------------------------- the child process
def stand_in_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOPM_STANDIN")}
    env.update(
        {
            "GEOPM_STANDIN_TOPOLOGY": "package=2,gpu=8",
            "GEOPM_STANDIN_POWER": "CPU=100,GPU=250",
            "GEOPM_STANDIN_STARTS": str(tmp_path / "starts"),
        }
    )
    env.update(extra)
    return env


REQUESTS = [
    Request("CPU_ENERGY", "package", None),
    Request("CPU_POWER", "package", None),
    Request("GPU_ENERGY", "gpu", None),
]


def test_command_line() -> None:
    backend = GeopmsessionBackend("/opt/geopm/bin/geopmsession", REQUESTS, 0.5)
    assert backend.command() == [
        "/opt/geopm/bin/geopmsession",
        "-p",
        "0.5",
        "-t",
        str(RUN_SECONDS),
        "--print-header",  # needed by older versions, a deprecated no-op in newer ones
    ]
    assert RUN_SECONDS >= 365 * 86400
    assert backend.requests[0] == Request("TIME", "board", 0)


def test_stand_in_session_2_packages_8_gpus(tmp_path: Path) -> None:
    backend = GeopmsessionBackend(str(SESSION_STANDIN), REQUESTS, 0.1, stand_in_env(tmp_path))
    sampler = Sampler([backend], 0.1)
    try:
        for _ in range(3):
            snapshot = sampler.sample_once()
    finally:
        sampler.stop()
        backend.close()
    readings = {(r.key.signal, r.key.index): r.value for r in snapshot.readings}
    assert snapshot.up == {"geopmsession": True}
    assert sorted(readings) == sorted(
        [("CPU_ENERGY", 0), ("CPU_ENERGY", 1), ("CPU_POWER", 0), ("CPU_POWER", 1)]
        + [("GPU_ENERGY", i) for i in range(8)]
        + [("GPU_POWER", i) for i in range(8)]
    )
    assert readings[("CPU_POWER", 0)] == 100.0  # given by geopmsession, not derived
    for index in range(8):  # derived from GPU_ENERGY over the TIME column
        assert readings[("GPU_POWER", index)] == pytest.approx(250.0, rel=1e-6)
    assert readings[("CPU_ENERGY", 0)] > 51985.06903076172  # the recorded start value


def test_unknown_signal_reports_geopmsession_error(tmp_path: Path) -> None:
    backend = GeopmsessionBackend(
        str(SESSION_STANDIN), [Request("NOT_A_SIGNAL", "board", 0)], 0.1, stand_in_env(tmp_path)
    )
    with pytest.raises(BackendError) as caught:
        backend.open()
    assert "status 255" in str(caught.value)
    assert 'unknown how to aggregate "NOT_A_SIGNAL"' in str(caught.value)


def test_a_signal_the_node_lacks_is_dropped(tmp_path: Path) -> None:
    requests = [Request("CPU_ENERGY", "package", None), Request("NOT_A_SIGNAL", "board", 0)]
    backend = GeopmsessionBackend(str(SESSION_STANDIN), requests, 0.1, stand_in_env(tmp_path))
    backend.open()
    try:
        batch = backend.read()
    finally:
        backend.close()
    assert [(s.key.signal, s.key.index) for s in batch.samples] == [
        ("CPU_ENERGY", 0),
        ("CPU_ENERGY", 1),
    ]
    assert len((tmp_path / "starts").read_text().splitlines()) == 2  # refused, then restarted


def test_missing_executable(tmp_path: Path) -> None:
    backend = GeopmsessionBackend(str(tmp_path / "nope"), REQUESTS, 0.1)
    with pytest.raises(BackendError, match="cannot run"):
        backend.open()


def test_replayed_recorded_trace_then_exit(tmp_path: Path) -> None:
    recorded = TRACES / "geopmsession_trace_2025_package-star.csv"
    backend = GeopmsessionBackend(
        str(SESSION_STANDIN),
        REQUESTS,
        0.1,
        stand_in_env(tmp_path, GEOPM_STANDIN_REPLAY=str(recorded)),
    )
    backend.open()
    try:
        batch = backend.read()
        assert batch.time == 0.658525605  # the TIME column
        assert {(s.key.signal, s.key.index): s.value for s in batch.samples} == {
            ("CPU_FREQUENCY_STATUS", 0): 1e9,
            ("CPU_FREQUENCY_STATUS", 1): 1.105e9,
            ("CPU_ENERGY", 0): 51985.06903076172,
            ("CPU_ENERGY", 1): 216490.1282958984,
        }
        with pytest.raises(BackendError, match="exited with status 0"):
            backend.read()
    finally:
        backend.close()


def test_replayed_trace_without_header(tmp_path: Path) -> None:
    """An old geopmsession prints no header: explicit requests still name the columns."""
    requests = [Request(k.signal, k.domain, k.index) for k in NO_HEADER_KEYS]
    recorded = TRACES / "geopmsession_trace_2024_no-header.csv"
    env = stand_in_env(tmp_path, GEOPM_STANDIN_REPLAY=str(recorded))
    backend = GeopmsessionBackend(str(SESSION_STANDIN), requests, 0.1, env)
    backend.open()
    try:
        batch = backend.read()  # the only row, read while waiting for a header
    finally:
        backend.close()
    assert batch.time == 70.250978379
    assert {(s.key.signal, s.key.index): s.value for s in batch.samples} == {
        ("CPU_FREQUENCY_STATUS", 0): 2434090909.090909,
        ("CPU_FREQUENCY_STATUS", 1): 2775000000.0,
        ("CPU_ENERGY", 0): 198575.8842163086,
        ("CPU_ENERGY", 1): 88752.19470214844,
    }
    star = GeopmsessionBackend(str(SESSION_STANDIN), REQUESTS, 0.1, env)
    with pytest.raises(BackendError, match="no header line"):  # '*': columns unknown
        star.open()


@pytest.mark.slow  # waits out the restart backoff: not in `make check`
def test_restart_with_backoff_keeps_counters_monotone(tmp_path: Path) -> None:
    env = stand_in_env(tmp_path, GEOPM_STANDIN_EXIT_AFTER="3")
    sampler = Sampler([GeopmsessionBackend(str(SESSION_STANDIN), REQUESTS, 0.1, env)], 0.1)
    seen: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for reading in sampler.snapshot.readings:
                if reading.key == SignalKey("CPU_ENERGY", "package", 0):
                    seen.append(reading.value)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    sampler.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            starts = (
                (tmp_path / "starts").read_text().splitlines()
                if (tmp_path / "starts").exists()
                else []
            )
            if len(starts) >= 3:
                break
            time.sleep(0.1)
    finally:
        sampler.stop()
        stop.set()
        watcher.join()
    times = [float(line.split()[1]) for line in starts]
    assert len(times) >= 3, starts
    assert times[1] - times[0] >= 1.0  # first retry after 1 s
    assert times[2] - times[1] >= 2.0  # then 2 s
    assert seen and all(b >= a for a, b in zip(seen, seen[1:], strict=False))
    assert sampler.snapshot.errors_total["geopmsession"] >= 2
    assert "simulated failure" in sampler.snapshot.last_error
