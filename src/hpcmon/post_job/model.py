"""What every post-job source hands to the frame: points plus the problems it met.

A source never raises for bad input: it keeps what is good and names each problem
(file and reason) in ``errors``, so one bad log never costs the job's other data. ``warnings``
are facts worth a line that do not make the run fail (e.g. a Darshan module flagged partial).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcmon.post_job.points import Point


@dataclass(frozen=True)
class JobContext:
    job_id: str
    cluster: str | None = None
    user: str | None = None
    app: str | None = None  # --app / the epilog's app:; else the Darshan executable (app.py)
    node: str | None = None  # a node that reads only its own inputs (not the job's first)
    node_position: int = 0  # that node's place in the job's node list (the first node: 0)

    def base_tags(self) -> dict[str, str]:
        """Tags every point of this job carries (``jobid``, and ``cluster`` when configured)."""
        tags = {"jobid": self.job_id}
        if self.cluster:
            tags["cluster"] = self.cluster
        return tags


@dataclass
class SourceOutput:
    points: list[Point] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: SourceOutput) -> None:
        self.points.extend(other.points)
        self.errors.extend(other.errors)
        self.warnings.extend(other.warnings)
