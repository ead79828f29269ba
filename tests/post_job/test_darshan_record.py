"""The job's record (issue 20): module counter sums, folded rule inputs, raw counters of kept
records, bytes per rank; checked against PyDarshan's own DataFrames of the same real logs
(a reader independent of the hook's), and the series each log adds."""

from __future__ import annotations

from collections import defaultdict

import pytest

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.darshan.record import (
    RANK_IMBALANCE,
    SLOW_METADATA_SECONDS,
    is_additive,
    prefix,
)
from hpcmon.post_job.model import JobContext
from tests.post_job.darshan_helpers import (
    DRISHTI,
    E3SM,
    IMBALANCED,
    IOR_DFS,
    MPI_IO_TEST,
    SKEW,
    TEXTS,
    log_path,
    pydarshan_records,
)

JOB = JobContext("77", "c")
LOGS = [IMBALANCED, MPI_IO_TEST, E3SM, SKEW, IOR_DFS, DRISHTI]


def points_of(stem: str, measurement: str):
    output = collect_darshan([log_path(stem)], [], JOB)
    assert not output.errors
    return [p for p in output.points if p.measurement == measurement]


def by_module(raw):
    out = defaultdict(list)
    for (module, rank, record_id), counters in raw.items():
        out[module].append((rank, record_id, counters))
    return out


@pytest.mark.parametrize("stem", LOGS)
def test_module_points_hold_every_additive_counter_summed(stem: str) -> None:
    raw = by_module(pydarshan_records(log_path(stem)))
    modules = {p.tags["module"]: p.fields for p in points_of(stem, "darshan_module")}
    checked = 0
    for module, records in raw.items():
        names = {n for _, _, c in records for n in c if is_additive(n)}
        assert names, module
        for name in names:
            expected = sum(max(c[name], 0) for _, _, c in records)
            assert modules[module][name.lower()] == pytest.approx(expected, rel=1e-12), name
            checked += 1
        assert not {n for n in modules[module] if n.startswith(prefix(module).lower() + "_")} - {
            n.lower() for n in names
        }
    assert checked > 20


@pytest.mark.parametrize("stem", [IMBALANCED, DRISHTI, SKEW, E3SM])
def test_folded_rule_inputs_by_hand(stem: str) -> None:
    records = by_module(pydarshan_records(log_path(stem)))["POSIX"]
    (posix,) = [p.fields for p in points_of(stem, "darshan_module") if p.tags["module"] == "POSIX"]
    for direction in ("READS", "WRITES"):
        random = sum(
            max(max(c[f"POSIX_{direction}"], 0) - max(c[f"POSIX_SEQ_{direction}"], 0), 0)
            for _, _, c in records
        )
        assert posix[f"random_{direction.lower()}"] == random
    redundant = sum(
        max(
            max(c["POSIX_BYTES_READ"], 0)
            - max(c["POSIX_MAX_BYTE_READ"], c["POSIX_MAX_BYTE_WRITTEN"], 0)
            - 1,
            0,
        )
        for _, _, c in records
    )
    assert posix["redundant_read_bytes"] == redundant
    meta = [max(c["POSIX_F_META_TIME"], 0) for _, _, c in records]
    assert posix["max_record_meta_time"] == max(meta)
    assert posix["slow_meta_records"] == sum(m > SLOW_METADATA_SECONDS for m in meta)
    for direction, name in (("READ", "read"), ("WRITTEN", "write")):
        per_file = defaultdict(list)
        for rank, record_id, c in records:
            if rank != -1:
                per_file[record_id].append(max(c[f"POSIX_BYTES_{direction}"], 0))
        spreads = [(max(v) - min(v)) / max(v) if max(v) > 0 else 0.0 for v in per_file.values()]
        assert posix[f"max_rank_{name}_imbalance"] == pytest.approx(max(spreads, default=0.0))
        hits = sum(s > RANK_IMBALANCE for s in spreads)
        assert posix[f"rank_{name}_imbalance_files"] == hits


@pytest.mark.parametrize("stem", [IMBALANCED, MPI_IO_TEST, SKEW])
def test_shared_records_carry_rank_extremes_and_variance(stem: str) -> None:
    raw = pydarshan_records(log_path(stem))
    shared = [p for p in points_of(stem, "darshan_record") if p.fields["rank"] == -1]
    assert shared
    for point in shared:
        module = point.tags["module"]
        c = raw[(module, -1, int(point.fields["record_id"]))]
        p = prefix(module)
        assert point.fields["slowest_rank_bytes"] == max(c[f"{p}_SLOWEST_RANK_BYTES"], 0)
        assert point.fields["fastest_rank_bytes"] == max(c[f"{p}_FASTEST_RANK_BYTES"], 0)
        assert point.fields["slowest_rank_time"] == max(c[f"{p}_F_SLOWEST_RANK_TIME"], 0)
        assert point.fields["variance_rank_bytes"] == max(c[f"{p}_F_VARIANCE_RANK_BYTES"], 0)
    own = [p for p in points_of(stem, "darshan_record") if p.fields["rank"] != -1]
    assert all("slowest_rank_bytes" not in p.fields for p in own)


@pytest.mark.parametrize("stem", [IMBALANCED, DRISHTI])
def test_rank_points_are_bytes_of_each_ranks_own_files(stem: str) -> None:
    raw = pydarshan_records(log_path(stem))
    expected: dict[int, float] = defaultdict(int)
    for (module, rank, _), c in raw.items():
        if module in ("POSIX", "STDIO") and rank >= 0:
            expected[rank] += max(c[f"{module}_BYTES_READ"], 0)
            expected[rank] += max(c[f"{module}_BYTES_WRITTEN"], 0)
    ranks = points_of(stem, "darshan_rank")
    got = {}
    for point in ranks:
        read, written = point.fields["bytes_read"], point.fields["bytes_written"]
        assert isinstance(read, int) and isinstance(written, int)
        got[point.fields["rank"]] = read + written
    assert got == dict(expected)
    assert len({p.time_ns for p in ranks}) == len(ranks)


def test_series_do_not_grow_with_records_or_ranks() -> None:
    """A 2,000-record Polaris job (darshan-parser text) and the bundled logs: each log adds
    a bounded number of series (measurement + tag set), records and ranks in fields."""
    for output in (
        collect_darshan([], [TEXTS / "polaris_3124622_1736380575.txt"], JOB),
        *(collect_darshan([log_path(stem)], [], JOB) for stem in LOGS),
    ):
        series = {(p.measurement, tuple(sorted(p.tags.items()))) for p in output.points}
        assert len(series) <= 30
        records = [p for p in output.points if p.measurement == "darshan_record"]
        keys = {(p.tags["module"], p.time_ns) for p in records}
        assert len(keys) == len(records)  # no two records overwrite each other
