"""The epilog writes the job's report (hpcmon-report) next to its points, only once InfluxDB
acknowledged all of them, within its time limit; a report that cannot be written is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpcmon.common.config import ConfigError
from hpcmon.post_job.epilog import load_config, run_epilog
from tests import servers
from tests.post_job.test_post_job_epilog import slurm_env, write_config

pytestmark = pytest.mark.integration

DATA = Path(__file__).parents[1] / "data"
LOG = DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.5.0.darshan"


def _config(tmp_path: Path, influx_url: str, **extra) -> dict:
    logs = tmp_path / "darshan"
    logs.mkdir(exist_ok=True)
    shutil.copy(LOG, logs / "alice_mpi-io-test_id4711_1-1-1.darshan")
    return {
        "cluster": "c9",
        "writers": {
            "influx_v1": {"url": influx_url, "database": "reports"},
            "request_timeout_seconds": 2,
        },
        "sources": {"darshan": {"logs": str(logs / "{user}_*_id{jobid}_*.darshan")}},
        "report": {"dir": str(tmp_path / "reports" / "{user}"), "format": "json"},
        **extra,
    }


def test_epilog_writes_the_report_once_points_are_in(influxdb1, tmp_path: Path) -> None:
    influxdb1.create_database("reports")
    config = write_config(tmp_path / "post-job.yaml", _config(tmp_path, influxdb1.url))
    assert run_epilog(config, environ=slurm_env(), now=None) == 0
    report = json.loads((tmp_path / "reports" / "alice" / "4711.json").read_text())
    assert report["job_id"] == "4711" and report["cluster"] == "c9"
    assert report["summary"]["bytes_written"] > 0  # read back from InfluxDB, not guessed


def test_no_report_while_points_are_only_spooled(tmp_path: Path, capfd) -> None:
    with servers.run_influxdb1() as server:
        url = server.url  # nothing listens there once the block ends
    data = _config(tmp_path, url, spool_dir=str(tmp_path / "spool"))
    config = write_config(tmp_path / "post-job.yaml", data)
    assert run_epilog(config, environ=slurm_env()) == 0
    assert not (tmp_path / "reports").exists()
    warnings = [line for line in capfd.readouterr().err.splitlines() if "report not" in line]
    assert len(warnings) == 1 and "not all in InfluxDB yet" in warnings[0]


@pytest.mark.parametrize(
    "report, message",
    [
        ({"format": "json"}, "report: give dir"),
        ({"dir": "/r", "format": "pdf"}, "report.format must be one of"),
        ({"dir": "/r", "colour": "red"}, "unknown key(s) colour"),
        ({"dir": "/r", "prometheus_url": "prom:9090"}, "report.prometheus_url"),
    ],
)
def test_bad_report_config_names_the_key(tmp_path: Path, report, message) -> None:
    data = _config(tmp_path, "http://127.0.0.1:8086")
    data["report"] = report
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(write_config(tmp_path / "bad.yaml", data))
