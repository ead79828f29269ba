"""Collectors register themselves in their own modules and, but for jobstats' fast writer,
follow prometheus-client's collect() contract: any CollectorRegistry can take them."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from hpcmon.exporter.cli import available_collectors, build_parser
from hpcmon.exporter.collector import FamilyCollector


def test_every_collector_registered_by_its_module() -> None:
    collectors = available_collectors()
    assert list(collectors) == ["jobstats", "geopm", "jobs", "postjob", "slurm"]
    for name, cls in collectors.items():
        assert cls.name == name
        module = cls.__module__
        assert module.startswith("hpcmon.exporter.") and name in module or name == "jobs"


def test_family_collectors_work_in_any_registry(tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    (jobs_dir / "4711").write_text("SLURM_JOB_UID=1000\n")
    options = build_parser(available_collectors()).parse_args(
        [f"--jobs.dir={jobs_dir}", f"--path.cgroupfs={tmp_path}", "--geopm.backend=powercap",
         f"--path.sysfs={tmp_path}"]
    )  # fmt: skip
    collectors = available_collectors()
    for name in ("geopm", "postjob", "slurm", "jobs"):
        collector = collectors[name](options)
        assert isinstance(collector, FamilyCollector)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        text = generate_latest(registry)
        assert text == collector.exposition()
    assert b'hpc_node_job_info{jobid="4711",uid="1000"} 1.0' in text
