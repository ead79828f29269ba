"""The I/O score: one number per insight and per job, so operations staff can sort finished jobs
by how badly they used the file system (docs/post-job-data.md, `job_diagnosis`).

Deterministic, from the insights alone (level and evidence), in [0, 100), higher is worse:

- an insight's extent ``a`` in [0, 1] is the share of the job's I/O it concerns: its evidence
  ``share`` (requests, bytes or energy the rule counted), else ``max_spread`` (the worst file's
  imbalance), else 1 (the rule concerns every request of its kind: no collective MPI-IO call,
  no MPI-IO at all, a record over the metadata-time limit);
- insight score = 50 x weight(level) x (1 + a) / 2, weight high 1, warn 0.4: a high insight
  scores 25 to 50, a warn insight 10 to 20 (half for being raised at all, half for its extent);
- job score = 100 x (1 - product over insights of (1 - insight score / 100)): 0 with no high or
  warn insight, at least the worst insight's score, higher with each further insight (they
  combine as independent chances of harm) and below 100 however many there are (one full
  high insight gives 50, two 75, three 87.5), so jobs with several problems stay apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hpcmon.report.insights import HIGH, WARN, Insight

WEIGHTS = {HIGH: 1.0, WARN: 0.4}
EXTENT_EVIDENCE = ("share", "max_spread")  # the first of these the insight has is its extent
INSIGHT_MAX = 50.0  # a full high insight; the job score combines them below 100
DIGITS = 2  # scores are rounded: the same insights always give the same number


def extent(insight: Insight) -> float:
    """Share of the job's I/O the insight concerns, in [0, 1] (1 when the rule gives none)."""
    for name in EXTENT_EVIDENCE:
        value = insight.evidence.get(name)
        if isinstance(value, int | float) and math.isfinite(value):
            return min(1.0, max(0.0, float(value)))
    return 1.0


def insight_score(insight: Insight) -> float:
    """0 for info insights (not scored), 10-20 for warn, 25-50 for high."""
    weight = WEIGHTS.get(insight.level, 0.0)
    return round(INSIGHT_MAX * weight * (1.0 + extent(insight)) / 2.0, DIGITS)


def job_score(insights: Iterable[Insight]) -> float:
    """The insights' scores combined, in [0, 100) (the same for any order of the insights)."""
    unharmed = 1.0
    for score in sorted(insight_score(i) for i in insights):
        unharmed *= 1.0 - score / 100.0
    return round(100.0 * (1.0 - unharmed), DIGITS)
