"""``--collector.jobs``: which Slurm jobs have processes on this node, as
``hpc_node_job_info{jobid, uid} 1``, so dashboards can join node power to jobs.

Sources, read at every scrape (a few directory listings):
- Slurm's cgroups under ``--path.cgroupfs``: v1 ``<controller>/slurm/uid_<uid>/job_<id>/``
  (``slurm_<node>`` with multiple slurmd), v2 ``system.slice/slurmstepd.scope/job_<id>/``
  (``<node>_slurmstepd.scope`` with multiple slurmd); v2 has no uid directory, so the uid is
  read from the ``Uid:`` line of ``<procfs>/<pid>/status`` of a process in the job;
- ``--jobs.dir``: one file per job written by a Slurm prolog and removed by the epilog; the
  file name is the job id, the content may give ``SLURM_JOB_UID=<uid>`` (or ``UID=``, or
  just the number). Names starting with ``.`` are ignored (write to ``.tmp`` then rename).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from hpcmon.exporter.collector import FamilyCollector, ProblemLog, add_flag, register

log = logging.getLogger("hpcmon.exporter.jobs")

_JOB_ID = re.compile(r"[A-Za-z0-9_.+\-]{1,64}")
_UID_LINE = re.compile(r"^\s*(?:SLURM_JOB_UID|UID|uid)\s*[=:]\s*(\d{1,10})\s*$", re.MULTILINE)
_V2_SCOPE = re.compile(r"(?:.+_)?slurmstepd\.scope")
_MAX_FILE = 4096
_MAX_PROCS_DEPTH = 4


@dataclass(frozen=True, slots=True)
class NodeJob:
    jobid: str
    uid: str  # "" when no source says


def _scandir(path: str | Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return [e for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:  # gone (job ended), not a directory, or not readable
        return []


def _job_id(name: str) -> str | None:
    if not name.startswith("job_"):
        return None
    jobid = name[4:]
    return jobid if _JOB_ID.fullmatch(jobid) else None


def jobs_from_cgroup_v1(root: Path) -> list[NodeJob]:
    """``<root>/<controller>/slurm[_<node>]/uid_<uid>/job_<id>``, any controller."""
    jobs: list[NodeJob] = []
    for controller in _scandir(root):
        for slurm in _scandir(controller.path):
            if slurm.name != "slurm" and not slurm.name.startswith("slurm_"):
                continue
            for user in _scandir(slurm.path):
                uid = user.name[4:] if user.name.startswith("uid_") else ""
                if not (uid.isascii() and uid.isdigit()):
                    continue
                for job in _scandir(user.path):
                    jobid = _job_id(job.name)
                    if jobid is not None:
                        jobs.append(NodeJob(jobid, uid))
    return jobs


def _first_pid(directory: str, depth: int = 0) -> str | None:
    """A process of the job's user: the ``slurm`` leaf of each step holds slurmstepd, which
    runs as root, so it is skipped (user tasks are under ``user/task_N``)."""
    try:
        with open(os.path.join(directory, "cgroup.procs"), "rb") as handle:
            for line in handle.read(_MAX_FILE).split():
                if line.isdigit():
                    return line.decode()
    except OSError:
        pass
    if depth >= _MAX_PROCS_DEPTH:
        return None
    for child in sorted(_scandir(directory), key=lambda e: e.name):
        if child.name == "slurm":
            continue
        pid = _first_pid(child.path, depth + 1)
        if pid is not None:
            return pid
    return None


def uid_of_pid(procfs: Path, pid: str) -> str:
    """Real uid from ``<procfs>/<pid>/status``, "" if the process is gone or unreadable."""
    try:
        with open(procfs / pid / "status", "rb") as handle:
            for line in handle.read(_MAX_FILE * 4).decode("ascii", "replace").splitlines():
                if line.startswith("Uid:"):
                    fields = line.split()
                    return fields[1] if len(fields) > 1 and fields[1].isdigit() else ""
    except OSError:
        pass
    return ""


def jobs_from_cgroup_v2(root: Path, procfs: Path) -> list[NodeJob]:
    """``<root>/system.slice/[<node>_]slurmstepd.scope/job_<id>``; uid from a job process."""
    jobs: list[NodeJob] = []
    for scope in _scandir(root / "system.slice"):
        if not _V2_SCOPE.fullmatch(scope.name):
            continue
        for job in _scandir(scope.path):
            jobid = _job_id(job.name)
            if jobid is None:
                continue
            pid = _first_pid(job.path)
            jobs.append(NodeJob(jobid, uid_of_pid(procfs, pid) if pid else ""))
    return jobs


def jobs_from_prolog_dir(directory: Path) -> tuple[list[NodeJob], list[str]]:
    """One file per job; returns the jobs and the problems found (bad names, unreadable)."""
    jobs: list[NodeJob] = []
    problems: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{directory}: cannot list: {exc.strerror or exc}"]
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_file():
            continue
        if not _JOB_ID.fullmatch(entry.name):
            problems.append(f"{entry.path}: file name is not a job id, ignored")
            continue
        try:
            with open(entry.path, "rb") as handle:
                text = handle.read(_MAX_FILE).decode("utf-8", "replace")
        except OSError as exc:
            problems.append(f"{entry.path}: cannot read: {exc.strerror or exc}")
            continue
        match = _UID_LINE.search(text)
        stripped = text.strip()
        uid = (
            match.group(1)
            if match
            else (
                stripped
                if stripped.isascii() and stripped.isdigit() and len(stripped) <= 10
                else ""
            )
        )
        jobs.append(NodeJob(entry.name, uid))
    return jobs, problems


def merge_jobs(*sources: list[NodeJob]) -> list[NodeJob]:
    """One entry per job id; a known uid wins over an unknown one."""
    merged: dict[str, str] = {}
    for jobs in sources:
        for job in jobs:
            if not merged.get(job.jobid):
                merged[job.jobid] = job.uid
    return [NodeJob(jobid, uid) for jobid, uid in sorted(merged.items())]


@register
class NodeJobsCollector(FamilyCollector):
    name = "jobs"
    description = "Slurm jobs with processes on this node (cgroups, prolog files)"
    enabled_by_default = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_flag(
            parser,
            "--jobs.dir",
            default=None,
            help="directory with one file per running job, written by a Slurm prolog",
        )

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        self.cgroupfs = Path(options.path_cgroupfs)
        self.jobs_dir = Path(options.jobs_dir) if options.jobs_dir else None
        self.procfs = Path(options.path_procfs)
        self._problems = ProblemLog(log, limit=1000)

    def jobs(self) -> list[NodeJob]:
        sources = [
            jobs_from_cgroup_v1(self.cgroupfs),
            jobs_from_cgroup_v2(self.cgroupfs, self.procfs),
        ]
        if self.jobs_dir is not None:
            from_files, problems = jobs_from_prolog_dir(self.jobs_dir)
            sources.append(from_files)
            for problem in problems:
                self._problems.warn(problem)
        return merge_jobs(*sources)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily(
            "hpc_node_job_info",
            "A Slurm job with processes on this node (1 per job).",
            labels=["jobid", "uid"],
        )
        for job in self.jobs():
            info.add_metric([job.jobid, job.uid], 1.0)
        yield info
