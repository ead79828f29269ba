"""Which of a job's nodes reads what: job-wide inputs (shared file system) on the job's first
node only, node-local ones (scope: node) on every node; the job's record (slurm_job) once.
The same on a real Slurm: tests/test_slurm_epilog.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpcmon.common.config import ConfigError
from hpcmon.post_job import epilog_config
from hpcmon.post_job.cli import main
from hpcmon.post_job.epilog import run_epilog
from tests.post_job.test_post_job_epilog import slurm_env, write_config
from tests.post_job.test_post_job_frame import GEOPM_REPORT

DARSHAN = (
    Path(__file__).parent.parent / "data" / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan"
)


def site(tmp_path: Path, **extra) -> Path:
    """A Darshan log on the 'shared file system' and a GEOPM report on the 'node'."""
    (tmp_path / "shared").mkdir()
    shutil.copy(DARSHAN, tmp_path / "shared" / "alice_mpi-io-test_id4711_1.darshan")
    (tmp_path / "node").mkdir()
    shutil.copy(GEOPM_REPORT, tmp_path / "node" / "4711.report")
    data = {
        "cluster": "c9",
        "writers": {"output": str(tmp_path / "lp" / "{jobid}.lp")},
        "slurm": {"squeue": str(tmp_path / "no-squeue"), "timeout_seconds": 1},
        "sources": {
            "darshan": {"logs": str(tmp_path / "shared" / "{user}_*_id{jobid}_*.darshan")},
            "geopm_report": {"reports": str(tmp_path / "node" / "{jobid}.report")},
        },
    }
    data.update(extra)
    return write_config(tmp_path / "post-job.yaml", data)


def measurements(tmp_path: Path) -> set[str]:
    path = tmp_path / "lp" / "4711.lp"
    if not path.exists():
        return set()
    return {line.split(",", 1)[0] for line in path.read_text().splitlines()}


NODES = {"SLURM_NODELIST": "n[1-2]", "SLURM_JOB_EXIT_CODE2": "3:0"}


def test_the_first_node_reads_everything_and_writes_the_job_s_record(tmp_path: Path) -> None:
    config = site(tmp_path)
    assert run_epilog(config, environ=slurm_env(SLURMD_NODENAME="n1", **NODES)) == 0
    found = measurements(tmp_path)
    assert {"darshan_job", "geopm_totals", "slurm_job"} <= found
    [record] = [
        line
        for line in (tmp_path / "lp" / "4711.lp").read_text().splitlines()
        if line.startswith("slurm_job,")
    ]
    assert 'nodelist="n[1-2]"' in record and "exit_code=3i" in record


def test_another_node_reads_only_its_node_local_inputs(tmp_path: Path) -> None:
    config = site(tmp_path)
    assert run_epilog(config, environ=slurm_env(SLURMD_NODENAME="n2", **NODES)) == 0
    found = measurements(tmp_path)
    assert "geopm_totals" in found
    assert not found & {"darshan_job", "darshan_module", "slurm_job", "app_run"}


def test_a_node_with_nothing_of_its_own_does_nothing(tmp_path: Path, caplog) -> None:
    config = site(tmp_path, sources={"darshan": {"logs": str(tmp_path / "shared/*.darshan")}})
    assert run_epilog(config, environ=slurm_env(SLURMD_NODENAME="n2", **NODES)) == 0
    assert measurements(tmp_path) == set()
    assert not any("slurmctld" in r.getMessage() for r in caplog.records)  # nobody asked


def test_scope_moves_a_source_to_every_node(tmp_path: Path) -> None:
    """A site whose Darshan logs are node-local (scope: node) reads them on every node."""
    logs = str(tmp_path / "shared" / "{user}_*_id{jobid}_*.darshan")
    config = site(tmp_path, sources={"darshan": {"logs": logs, "scope": "node"}})
    assert run_epilog(config, environ=slurm_env(SLURMD_NODENAME="n2", **NODES)) == 0
    assert "darshan_job" in measurements(tmp_path)
    assert "slurm_job" not in measurements(tmp_path)


def test_a_node_that_cannot_tell_reads_everything(tmp_path: Path) -> None:
    config = site(tmp_path)
    assert run_epilog(config, environ=slurm_env()) == 0  # no SLURMD_NODENAME: as one node
    assert {"darshan_job", "geopm_totals", "slurm_job"} <= measurements(tmp_path)


def test_a_job_without_any_input_still_has_its_record(tmp_path: Path) -> None:
    config = site(tmp_path, sources={})
    assert run_epilog(config, environ=slurm_env(SLURMD_NODENAME="n1", **NODES)) == 0
    assert measurements(tmp_path) == {"slurm_job", "job_index"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sources": {"darshan": {"logdir": "/l", "scope": "all"}}}, "scope must be 'job'"),
        ({"slurm": {"scontrol": "x"}}, "unknown key(s) scontrol"),
        ({"slurm": {"timeout_seconds": 0}}, "slurm.timeout_seconds must be"),
        ({"slurm": {"squeue": ""}}, "slurm.squeue must be a non-empty string"),
    ],
)
def test_bad_scope_or_slurm_settings(tmp_path: Path, data: dict, message: str) -> None:
    path = write_config(tmp_path / "c.yaml", {"writers": {"output": "/o.lp"}, **data})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        epilog_config.load_config(path)


def test_default_scopes() -> None:
    config = epilog_config.load_config(
        Path(__file__).parents[2] / "deploy" / "slurm" / "post-job.example.yaml"
    )
    assert {s.name: s.scope for s in config.sources} == {
        "darshan": "job",
        "recorder": "job",
        "viztracer": "job",
        "geopm_report": "node",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "{config}", "--spool-dir", "/s"], "not --spool-dir too"),
        (["--config", "{missing}"], "missing.yaml"),
        (["--config", "{nospool}"], "no spool_dir: nothing to replay"),
        ([], "flush needs --spool-dir (or --config FILE.yaml)"),
    ],
)
def test_flush_config_usage(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    writers = {"influx_v1": {"url": "http://127.0.0.1:9", "database": "d"}}
    paths = {
        "config": write_config(tmp_path / "c.yaml", {"writers": writers, "spool_dir": "/s"}),
        "nospool": write_config(tmp_path / "n.yaml", {"writers": writers}),
        "missing": tmp_path / "missing.yaml",
    }
    assert main(["flush", *(a.format(**paths) for a in args)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert message in line
