"""Each diagnosis rule on real Darshan logs: one log that must raise it, one that must not,
through the Darshan log itself and through the points the real hook writes; and agreement
with Drishti (drishti-io, run on the same logs) for every Drishti trigger the report covers,
from the log and from the real InfluxDB 1.6.7 the hook wrote it into."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.viztracer import collect_viztracer
from hpcmon.report.darshan_log import darshan_from_logs
from hpcmon.report.insights import RULES, diagnose
from hpcmon.report.model import JobData
from hpcmon.report.records import darshan_from_rows, functions_from_rows, rows_from_points
from tests.report.report_database import DATABASE, from_database, hook_writes, report
from tests.report.report_drishti import drishti_codes

DATA = Path(__file__).parents[1] / "data"
LOGS = DATA / "darshan" / "logs"
OWN = DATA / "darshan-report"

IMBALANCED = LOGS / "imbalanced-io.darshan"
HDF5_1BYTE = LOGS / "hdf5_diagonal_write_1_byte_dxt.darshan"
MPI_IO_TEST = LOGS / "mpi-io-test-x86_64-3.5.0.darshan"
SKEW = LOGS / "skew-autobench-ior.darshan"
INACTIVE = LOGS / "treddy_runtime_heatmap_inactive_ranks.darshan"
E3SM = LOGS / "e3sm_io_heatmap_only.darshan"
OPENPMD = next(LOGS.glob("jlbez_8a_benchmark_write_parallel_*.darshan"))
NONMPI = OWN / "nonmpi_dxt_anonymized.darshan"
SPECFEM = next(OWN.glob("iwang_xspecfem3D_*.darshan"))

# rule id -> (log that raises it, log that does not)
CASES = {
    "stdio_heavy": (INACTIVE, IMBALANCED),
    "no_mpiio": (HDF5_1BYTE, IMBALANCED),
    "small_reads": (IMBALANCED, MPI_IO_TEST),
    "small_writes": (IMBALANCED, MPI_IO_TEST),
    "misaligned_memory": (HDF5_1BYTE, MPI_IO_TEST),
    "misaligned_file": (HDF5_1BYTE, MPI_IO_TEST),
    "random_reads": (NONMPI, IMBALANCED),
    "shared_small_reads": (IMBALANCED, MPI_IO_TEST),
    "shared_small_writes": (IMBALANCED, MPI_IO_TEST),
    "metadata_time": (SKEW, IMBALANCED),
    "shared_data_imbalance": (IMBALANCED, MPI_IO_TEST),
    "shared_time_imbalance": (IMBALANCED, MPI_IO_TEST),
    "rank_write_imbalance": (IMBALANCED, MPI_IO_TEST),
    "rank_read_imbalance": (OPENPMD, IMBALANCED),
    "redundant_reads": (E3SM, MPI_IO_TEST),
    "mpiio_no_collective_reads": (SPECFEM, IMBALANCED),
}
# Rules the InfluxDB points alone can evaluate: all of them (issue 20, the hook's record).
FROM_POINTS = set(CASES)


def from_log(path: Path) -> JobData:
    data, problems = darshan_from_logs([path])
    assert data is not None, problems
    return JobData("1", darshan=data)


def from_points(path: Path) -> JobData:
    output = collect_darshan([path], [], JobContext(job_id="1", cluster="test"))
    data = darshan_from_rows(rows_from_points(output.points))
    assert data is not None, output.errors
    return JobData("1", cluster="test", darshan=data)


def raised(job: JobData) -> set[str]:
    return {insight.id for insight in diagnose(job)[0]}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_raises_on_one_real_log_and_not_on_another(rule: str) -> None:
    raising, quiet = CASES[rule]
    assert rule in raised(from_log(raising))
    assert rule not in raised(from_log(quiet))


@pytest.mark.parametrize("rule", sorted(FROM_POINTS))
def test_rule_from_the_hooks_points(rule: str) -> None:
    raising, quiet = CASES[rule]
    assert rule in raised(from_points(raising))
    assert rule not in raised(from_points(quiet))


def test_points_evaluate_what_the_log_evaluates() -> None:
    for log in (IMBALANCED, SPECFEM):
        _, skipped = diagnose(from_points(log))
        assert {s.id for s in skipped} == {s.id for s in diagnose(from_log(log))[1]}
        assert not {s.id for s in skipped} & set(CASES)


def test_evidence_numbers_match_the_counters() -> None:
    insight = next(i for i in diagnose(from_log(HDF5_1BYTE))[0] if i.id == "misaligned_file")
    # hdf5_diagonal_write_1_byte_dxt: every POSIX request is counted in FILE_NOT_ALIGNED
    share, not_aligned = insight.evidence["share"], insight.evidence["not_aligned"]
    operations = insight.evidence["operations"]
    assert isinstance(share, int | float) and 0.1 < share <= 1.0
    assert isinstance(not_aligned, int | float) and isinstance(operations, int | float)
    assert not_aligned <= operations


def test_python_hotspot_from_a_real_viztracer_trace() -> None:
    output = collect_viztracer([DATA / "viztracer" / "threaded.json"], JobContext(job_id="1"))
    job = JobData("1", functions=functions_from_rows(rows_from_points(output.points)))
    assert job.functions
    assert "python_hotspot" in raised(job)
    # a multiprocessing trace whose top function (posix.waitpid) has 29 % of the self time
    output = collect_viztracer([DATA / "viztracer" / "multiproc.json.gz"], JobContext(job_id="1"))
    spread = JobData("1", functions=functions_from_rows(rows_from_points(output.points)))
    assert spread.functions
    assert "python_hotspot" not in raised(spread)


AGREEMENT_LOGS = [IMBALANCED, HDF5_1BYTE, MPI_IO_TEST, SKEW, INACTIVE, NONMPI, OPENPMD, SPECFEM]


@pytest.mark.parametrize("log", AGREEMENT_LOGS, ids=lambda p: p.stem[:32])
def test_same_drishti_triggers_as_drishti(log: Path, tmp_path: Path, influxdb1) -> None:
    """From the log (--darshan) and from the database the real hook wrote the log into."""
    expected = drishti_codes(log, tmp_path)
    assert expected is not None, "drishti failed on the log"
    ours = {i.drishti for i in diagnose(from_log(log))[0] if i.drishti}
    assert ours == expected
    influxdb1.create_database(DATABASE)
    job = str(2000 + AGREEMENT_LOGS.index(log))
    hook_writes(influxdb1, log, job, tmp_path / "spool")
    document = report(job, tmp_path / "db.json", *from_database(influxdb1))
    assert document["sources"]["darshan"] == "InfluxDB points"
    assert {i["drishti_code"] for i in document["insights"] if i["drishti_code"]} == expected


def test_agreement_logs_cover_every_rule_with_a_raising_log() -> None:
    assert set(CASES) | {"python_hotspot"} >= {
        r.id
        for r in RULES
        if r.id
        not in {
            "random_writes",
            "mpiio_no_collective_writes",
            "target_dominated",
            "io_phase_target_spike",
            "energy_waiting_io",
        }
    }
