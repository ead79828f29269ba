"""Every Darshan signal at full precision, on every fixture log, against values computed here
independently from PyDarshan's own records (``records[module].to_df()``), including the logs
with garbage timers (ppc64 3.1.5), partial DXT and partial STDIO; the per-log tag; headers
that cannot be true; and hostile bytes through the isolated PyDarshan reader (hypothesis)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcmon.post_job.cli import main
from hpcmon.post_job.darshan import collect_darshan, read_log, read_text
from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_logs_isolated
from hpcmon.post_job.darshan.signals import NA, compute_signals
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.problems import SourceError
from tests.post_job.darshan_helpers import LOGS, MPI_IO_TEST, log_path, pydarshan_records, text_path

MIB = 1048576.0
JOB = JobContext("99", "c")
ALL_LOGS = sorted(LOGS.glob("*.darshan"))
NEGATIVE_TIMERS = "mpi-io-test-ppc64-3.1.5"  # POSIX_F_META_TIME = -222 s, -2e-304 s
PARTIAL_DXT = "partial_data_dxt"
PARTIAL_STDIO = "partial_data_stdio"
SAME_SECOND = [  # two processes of one DLIO workflow that started in the same second
    "snyder_python3_id3116902-2110365_12-19-66957-188958432683465822_1",
    "snyder_python3_id3116902-2110366_12-19-66957-4077632997277538683_1",
]

# The spec's formulas, restated here from the spec and post_job/darshan/README.md (not
# imported from the code under test): operations and timers of each module.
OPS = {
    "POSIX": (("POSIX_READS",), ("POSIX_WRITES",)),
    "MPI-IO": (
        ("MPIIO_INDEP_READS", "MPIIO_COLL_READS", "MPIIO_SPLIT_READS", "MPIIO_NB_READS"),
        ("MPIIO_INDEP_WRITES", "MPIIO_COLL_WRITES", "MPIIO_SPLIT_WRITES", "MPIIO_NB_WRITES"),
    ),
    "STDIO": (("STDIO_READS",), ("STDIO_WRITES",)),
    "H5D": (("H5D_READS",), ("H5D_WRITES",)),
    "PNETCDF_VAR": (
        ("PNETCDF_VAR_INDEP_READS", "PNETCDF_VAR_COLL_READS", "PNETCDF_VAR_NB_READS"),
        ("PNETCDF_VAR_INDEP_WRITES", "PNETCDF_VAR_COLL_WRITES", "PNETCDF_VAR_NB_WRITES"),
    ),
    "DFS": (("DFS_READS", "DFS_READXS"), ("DFS_WRITES", "DFS_WRITEXS")),
    "DAOS": (
        ("DAOS_OBJ_FETCHES", "DAOS_ARRAY_READS", "DAOS_KV_GETS"),
        ("DAOS_OBJ_UPDATES", "DAOS_ARRAY_WRITES", "DAOS_KV_PUTS"),
    ),
}
PREFIX = {"MPI-IO": "MPIIO"}
LOWER = {
    "MPI-IO": ("POSIX",),
    "H5F": ("MPI-IO", "POSIX"),
    "H5D": ("MPI-IO", "POSIX"),
    "PNETCDF_VAR": ("MPI-IO", "POSIX"),
    "PNETCDF_FILE": ("PNETCDF_VAR", "MPI-IO", "POSIX"),
    "DFS": ("DAOS",),
}
BYTES = {
    module: (
        f"{PREFIX.get(module, module)}_BYTES_READ",
        f"{PREFIX.get(module, module)}_BYTES_WRITTEN",
    )
    for module in (*OPS, "PNETCDF_FILE")
}


class Missing(Exception):
    pass


def _timer_state(value: float) -> str | None:
    if value == -1:
        return "not_monitored"
    if not math.isfinite(value) or value < 0 or value > 1e10:
        return "invalid_time"
    return None


def spec_ratio(c: dict, num: tuple, den: tuple, zero: str, scale: float = 1.0) -> object:
    """sum(num) * scale / sum(den) with the spec's NA precedence."""
    names = (*num, *den)
    if any(name not in c for name in names):
        return NA("not_available")
    if any(c[name] == -1 for name in names):
        return NA("not_monitored")
    states = {_timer_state(c[n]) for n in names if "_F_" in n}
    if "invalid_time" in states:
        return NA("invalid_time")
    numerator = sum(c[n] for n in num) * scale
    denominator = sum(c[n] for n in den)
    if denominator <= 0:
        return NA(zero)
    return numerator / denominator


def expected_record(module: str, c: dict, rank: int) -> dict[str, object]:
    p = PREFIX.get(module, module)
    reads, writes = OPS[module]
    rt, wt = (f"{p}_F_READ_TIME",), (f"{p}_F_WRITE_TIME",)
    br, bw = (f"{p}_BYTES_READ",), (f"{p}_BYTES_WRITTEN",)
    out = {
        "read_bw": spec_ratio(c, br, rt, "no_read_time", 1 / MIB),
        "write_bw": spec_ratio(c, bw, wt, "no_write_time", 1 / MIB),
        "read_iops": spec_ratio(c, reads, rt, "no_read_time"),
        "write_iops": spec_ratio(c, writes, wt, "no_write_time"),
        "avg_read_size": spec_ratio(c, br, reads, "no_reads"),
        "avg_write_size": spec_ratio(c, bw, writes, "no_writes"),
    }
    if module != "POSIX":
        return out

    def g(*names: str) -> tuple[str, ...]:
        return tuple(f"POSIX_{n}" for n in names)

    small = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
    io = g("READS", "WRITES")
    out.update(
        seq_read_ratio=spec_ratio(c, g("SEQ_READS"), g("READS"), "no_reads"),
        seq_write_ratio=spec_ratio(c, g("SEQ_WRITES"), g("WRITES"), "no_writes"),
        consec_read_ratio=spec_ratio(c, g("CONSEC_READS"), g("READS"), "no_reads"),
        consec_write_ratio=spec_ratio(c, g("CONSEC_WRITES"), g("WRITES"), "no_writes"),
        seq_ratio=spec_ratio(c, g("SEQ_READS", "SEQ_WRITES"), io, "no_io"),
        consec_ratio=spec_ratio(c, g("CONSEC_READS", "CONSEC_WRITES"), io, "no_io"),
        meta_intensity=spec_ratio(
            c, g("OPENS", "STATS", "SEEKS", "FSYNCS", "FDSYNCS"), io, "no_io"
        ),
        meta_fraction=spec_ratio(
            c, g("F_META_TIME"), g("F_READ_TIME", "F_WRITE_TIME", "F_META_TIME"), "no_time"
        ),
        unaligned_read_ratio=spec_ratio(c, g("FILE_NOT_ALIGNED"), g("READS"), "no_reads"),
        unaligned_write_ratio=spec_ratio(c, g("FILE_NOT_ALIGNED"), g("WRITES"), "no_writes"),
        small_read_ratio=spec_ratio(
            c, g(*(f"SIZE_READ_{s}" for s in small)), g("READS"), "no_reads"
        ),
        small_write_ratio=spec_ratio(
            c, g(*(f"SIZE_WRITE_{s}" for s in small)), g("WRITES"), "no_writes"
        ),
        is_shared=1 if rank == -1 else 0,
    )
    meta = sum(c[n] for n in g("OPENS", "STATS", "SEEKS", "FSYNCS", "FDSYNCS"))
    if all(c[n] != -1 for n in g("OPENS", "STATS", "SEEKS", "FSYNCS", "FDSYNCS")):
        out["meta_ops"] = int(meta)
    moved = c["POSIX_BYTES_READ"] + c["POSIX_BYTES_WRITTEN"]
    if rank != -1:
        out["rank_imbalance_ratio"] = out["bw_variance_proxy"] = NA("not_shared_file")
    elif moved <= 0:
        out["rank_imbalance_ratio"] = out["bw_variance_proxy"] = NA("no_bytes")
    else:
        out["rank_imbalance_ratio"] = spec_ratio(
            c, g("SLOWEST_RANK_BYTES"), g("FASTEST_RANK_BYTES"), "no_fastest_bytes"
        )
        out["bw_variance_proxy"] = c["POSIX_F_VARIANCE_RANK_BYTES"]
    return out


def assert_same(got: object, want: object, where: str) -> None:
    if isinstance(want, NA):
        assert got == want, f"{where}: {got} != {want}"
    else:
        assert not isinstance(got, NA), f"{where}: {got}, expected {want}"
        assert got == pytest.approx(want, rel=1e-13, abs=0), where


def our_records(signals) -> dict[tuple[str, int, int], dict]:
    return {
        (records.module, int(records.ranks[i]), int(records.record_ids[i])): records.row(i)
        for records in signals.records
        for i in range(len(records))
    }


@pytest.mark.parametrize("path", ALL_LOGS, ids=[p.stem[:40] for p in ALL_LOGS])
def test_every_record_signal_equals_the_spec_on_pydarshans_records(path: Path) -> None:
    signals = compute_signals(read_log(path))
    ours = our_records(signals)
    theirs = pydarshan_records(path)
    assert set(ours) == {k for k in theirs if k[0] in {m.module for m in signals.modules}}
    checked = 0
    for key, counters in theirs.items():
        module, rank, _ = key
        if module not in OPS:
            continue
        for name, want in expected_record(module, counters, rank).items():
            assert_same(ours[key][name], want, f"{path.name} {key} {name}")
            checked += 1
    assert checked or not theirs


@pytest.mark.parametrize("path", ALL_LOGS, ids=[p.stem[:40] for p in ALL_LOGS])
def test_module_sums_job_totals_and_times_are_never_negative(path: Path) -> None:
    log = read_log(path)
    signals = compute_signals(log)
    theirs = pydarshan_records(path)
    for module in signals.modules:
        if module.module not in OPS:
            continue
        p = PREFIX.get(module.module, module.module)
        rows = [c for (m, _, _), c in theirs.items() if m == module.module]
        reads, writes = OPS[module.module]
        for signal, names in (
            ("total_reads", reads),
            ("total_writes", writes),
            ("total_bytes_read", (f"{p}_BYTES_READ",)),
            ("total_bytes_written", (f"{p}_BYTES_WRITTEN",)),
        ):
            if any(c[n] == -1 for c in rows for n in names):
                assert module.values[signal] == NA("not_monitored")
            else:
                assert module.values[signal] == sum(max(0, c[n]) for c in rows for n in names)
        for name, value in module.values.items():
            assert isinstance(value, NA) or value >= 0, (path.name, module.module, name)
    for name, value in signals.job.items():
        assert isinstance(value, int | float) and value >= 0, (path.name, name)
    # job totals: modules with records, each counted unless one it is built on is present
    # (README: MPI-IO over POSIX, H5*/PNETCDF_VAR over MPI-IO/POSIX, PNETCDF_FILE over
    # PNETCDF_VAR, DFS over DAOS); a -1 counts as 0
    present = {m for (m, _, _) in theirs}
    counted = [m for m in present if not any(low in present for low in LOWER.get(m, ()))]
    assert sorted(signals.counted_modules) == sorted(counted)
    for signal, names_of in (
        ("total_bytes_read", lambda m: BYTES.get(m, (None, None))[0]),
        ("total_bytes_written", lambda m: BYTES.get(m, (None, None))[1]),
        ("total_reads", lambda m: OPS.get(m, ((), ()))[0]),
        ("total_writes", lambda m: OPS.get(m, ((), ()))[1]),
    ):
        want = 0
        for (module, _, _), c in theirs.items():
            names = names_of(module) if module in counted else None
            if not names:
                continue
            for name in (names,) if isinstance(names, str) else names:
                want += max(0, c[name])
        assert signals.job[signal] == want, (path.name, signal)
    # no negative time or bandwidth at record level either
    for row in our_records(signals).values():
        for name, value in row.items():
            assert isinstance(value, NA) or value >= 0, (path.name, name, value)


def test_garbage_timers_are_na_invalid_time_and_minus_one_stays_not_monitored() -> None:
    path = log_path(NEGATIVE_TIMERS)
    theirs = pydarshan_records(path)
    ((key, counters),) = [(k, c) for k, c in theirs.items() if k[0] == "POSIX"]
    assert counters["POSIX_F_META_TIME"] < -1  # the garbage this log really holds
    signals = compute_signals(read_log(path))
    row = our_records(signals)[key]
    assert row["meta_fraction"] == NA("invalid_time")
    posix = {m.module: m.values for m in signals.modules}["POSIX"]
    assert posix["agg_time_by_slowest"] == NA("invalid_time")
    assert posix["read_bw"] == NA("invalid_time")
    output = collect_darshan([path], [], JOB)
    lines = [point.to_line() for point in output.points]
    assert any("agg_time_by_slowest:invalid_time" in line for line in lines)
    assert output.errors == []


def test_full_precision_times_reach_the_points() -> None:
    """A record's io_time field is PyDarshan's read+write+meta time to the last bit (not
    rounded to the microsecond darshan-parser prints)."""
    path = log_path(MPI_IO_TEST)
    theirs = pydarshan_records(path)
    output = collect_darshan([path], [], JOB)
    seen = 0
    for point in output.points:
        if point.measurement != "darshan_record":
            continue
        rank = point.fields["rank"]
        assert isinstance(rank, int)
        key = (point.tags["module"], rank, int(point.fields["record_id"]))
        c = theirs[key]
        p = PREFIX.get(key[0], key[0])
        want = c[f"{p}_F_READ_TIME"] + c[f"{p}_F_WRITE_TIME"] + c[f"{p}_F_META_TIME"]
        assert point.fields["io_time"] == pytest.approx(want, rel=1e-15, abs=0)
        seen += want != round(want, 6)
    assert seen  # some times really have more than 6 decimals


def test_partial_dxt_and_partial_stdio_are_valid_logs_exit_0(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.lp"
    status = main(["--job-id", "7", "--darshan", str(log_path(PARTIAL_DXT)),
                   str(log_path(PARTIAL_STDIO)), "--output", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 0
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert len(warnings) == 3 and " ERROR " not in err
    assert {w.split("module ")[1].split(" ")[0] for w in warnings} == {
        "DXT_POSIX",
        "DXT_MPIIO",
        "STDIO",
    }
    text = out.read_text()
    assert 'partial_modules="DXT_POSIX,DXT_MPIIO"' in text
    assert 'partial_modules="STDIO"' in text
    [stdio] = [
        line
        for line in text.splitlines()
        if line.startswith("darshan_module,")
        and ",module=STDIO " in line
        and 'jobid="7"' in line
        and 'log="partial_data_stdio"' in line
    ]
    assert "partial=true" in stdio


def test_logs_started_in_the_same_second_keep_every_point() -> None:
    paths = [log_path(stem) for stem in SAME_SECOND]
    output = collect_darshan(paths, [], JOB)
    jobs = [p for p in output.points if p.measurement == "darshan_job"]
    assert len({p.time_ns for p in jobs}) == 1  # same start second: the case that collided
    assert {p.tags["log"] for p in jobs} == set(SAME_SECOND)
    keys = [(p.measurement, tuple(sorted(p.tags.items())), p.time_ns) for p in output.points]
    assert len(keys) == len(set(keys))
    again = collect_darshan(paths, [], JOB)  # idempotent: same input, same lines
    assert [p.to_line() for p in again.points] == [p.to_line() for p in output.points]


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (("# nprocs: 4", "# nprocs: 4400000000000000000"), "nprocs", "nprocs=4400000000000000000"),
        (("# run time: ", "# run time: -3"), "runtime", "runtime=-3"),
    ],
)
def test_implausible_header_values_are_flagged_not_written(
    tmp_path: Path, edit, field: str, message: str
) -> None:
    lines = text_path(MPI_IO_TEST).read_text().splitlines()
    changed = [edit[1] if line.startswith(edit[0]) else line for line in lines]
    assert changed != lines
    path = tmp_path / "odd.txt"
    path.write_text("\n".join(changed) + "\n")
    output = collect_darshan([], [path], JOB)
    (error,) = output.errors
    assert str(path) in error and "implausible header" in error and message in error
    (job,) = [p for p in output.points if p.measurement == "darshan_job"]
    na_reasons = job.fields["na_reasons"]
    assert isinstance(na_reasons, str)
    assert field not in job.fields and f"{field}:implausible_header" in na_reasons


def test_a_start_time_in_the_future_refuses_the_log(tmp_path: Path) -> None:
    lines = text_path(MPI_IO_TEST).read_text().splitlines()
    path = tmp_path / "future.txt"
    path.write_text(
        "\n".join(
            "# start_time: 99999999999" if ln.startswith("# start_time:") else ln for ln in lines
        )
        + "\n"  # fmt: skip
    )
    output = collect_darshan([], [path], JOB)
    assert output.points == [] and len(output.errors) == 1 and "log refused" in output.errors[0]


def test_no_negative_zero_in_any_line() -> None:
    output = collect_darshan(ALL_LOGS, [], JOB)
    for point in output.points:
        line = point.to_line()
        assert "=-0 " not in line and "=-0," not in line and not line.endswith("=-0")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_logs_through_the_isolated_reader_never_raise(tmp_path: Path, data) -> None:
    """Any truncation or flipped byte of a real log: an error naming the file or a log, never
    an exception, and a good log read after it by the same call is intact."""
    source = log_path(MPI_IO_TEST).read_bytes()
    damaged = bytearray(source[: data.draw(st.integers(1, len(source)))])
    for _ in range(data.draw(st.integers(0, 3))):
        position = data.draw(st.integers(0, len(damaged) - 1))
        damaged[position] ^= data.draw(st.integers(1, 255))
    bad = tmp_path / f"bad{data.draw(st.integers(0, 10**9))}.darshan"
    bad.write_bytes(bytes(damaged))
    results = list(read_darshan_logs_isolated([bad, log_path(MPI_IO_TEST)]))
    (_, first), (_, second) = results
    if isinstance(first, SourceError):
        assert str(first).startswith(f"{bad}: ")
    assert not isinstance(second, Exception) and second.problems == []
    reference = read_log(log_path(MPI_IO_TEST))
    assert compute_signals(second).job == compute_signals(reference).job


def test_text_reader_is_untouched_by_the_precision_change() -> None:
    # the text carries what darshan-parser printed; nothing is rounded further
    log = read_text(text_path(MPI_IO_TEST))
    assert log.job.run_time == float(
        next(
            line.split(": ")[1]
            for line in text_path(MPI_IO_TEST).read_text().splitlines()
            if line.startswith("# run time:")
        )
    )


def test_inconsistent_module_counters_are_flagged_and_named(tmp_path: Path) -> None:
    """Bytes read with no read counted (seen in real 3.4.6 DAOS logs): a warning, the module
    point's ``inconsistent`` field and the job's ``inconsistent_modules``; the totals still
    add the module's counters as read (documented)."""
    lines = text_path(MPI_IO_TEST).read_text().splitlines()
    changed = []
    for line in lines:
        fields = line.split("\t")
        if len(fields) > 4 and fields[0] == "POSIX" and fields[3] == "POSIX_READS":
            fields[4] = "0"
            line = "\t".join(fields)
        changed.append(line)
    path = tmp_path / "inconsistent.txt"
    path.write_text("\n".join(changed) + "\n")
    output = collect_darshan([], [path], JOB)
    assert output.errors == []
    (warning,) = output.warnings
    assert "module POSIX has inconsistent counters: read_bytes_without_reads:1" in warning
    (posix,) = [
        p
        for p in output.points
        if p.measurement == "darshan_module" and p.tags["module"] == "POSIX"
    ]
    assert posix.fields["inconsistent"] == "read_bytes_without_reads:1"
    (job,) = [p for p in output.points if p.measurement == "darshan_job"]
    assert job.fields["inconsistent_modules"] == "POSIX"
    clean = collect_darshan([], [text_path(MPI_IO_TEST)], JOB)
    (clean_job,) = [p for p in clean.points if p.measurement == "darshan_job"]
    assert clean_job.fields["inconsistent_modules"] == "" and clean.warnings == []
    assert job.fields["total_bytes_read"] == clean_job.fields["total_bytes_read"]


def test_a_log_read_leaves_no_report_for_the_garbage_collector() -> None:
    """PyDarshan's record collections refer back to their report: left in it, each log read
    would stay in memory (with its arrays) until a full collection, which a process that
    allocates few objects may not run for hundreds of logs."""
    import gc

    import darshan

    from hpcmon.post_job.darshan.reader_pydarshan import read_darshan_log

    def reports() -> int:
        return sum(isinstance(o, darshan.DarshanReport) for o in gc.get_objects())

    gc.collect()
    before = reports()
    gc.disable()
    try:
        for path in ALL_LOGS:
            read_darshan_log(path)
        assert reports() == before
    finally:
        gc.enable()
