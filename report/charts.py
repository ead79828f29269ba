"""The HTML report's pictures as inline SVG strings (matplotlib, no network, no files)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hpcmon.report.model import JobData  # noqa: E402

matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: smaller, selectable
        "svg.hashsalt": "hpcmon-report",  # same ids on every run
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)
MIB = 1024.0 * 1024.0


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure():
    return plt.subplots(figsize=(7.5, 2.4))


def heatmap_timeline(job: JobData) -> str | None:
    """Bytes moved per heatmap bin, one step line per submodule and direction, from each
    log's own start (a job's logs start together; the bins of two runs are overlaid)."""
    if job.darshan is None or not job.darshan.heatmaps:
        return None
    figure, axes = _figure()
    for heatmap in job.darshan.heatmaps:
        t = np.arange(len(heatmap.read_bytes) + 1) * heatmap.width
        for label, values in (("read", heatmap.read_bytes), ("write", heatmap.write_bytes)):
            if values.any():
                axes.stairs(values / MIB, t, label=f"{heatmap.module} {label}", linewidth=1.2)
    axes.set_xlabel("seconds since the log's start")
    axes.set_ylabel("MiB per bin")
    axes.legend(loc="upper right", fontsize=7, ncol=3)
    return _svg(figure)


def bytes_per_rank(per_rank: dict[int, float]) -> str | None:
    if not per_rank:
        return None
    figure, axes = _figure()
    ranks = np.fromiter(per_rank.keys(), dtype=np.int64)
    values = np.fromiter(per_rank.values(), dtype=np.float64) / MIB
    order = np.argsort(ranks)
    if len(ranks) <= 128:
        axes.bar(ranks[order], values[order], width=0.8)
    else:  # one filled step line: a thousand bars cost more than they show
        axes.fill_between(ranks[order], values[order], step="mid", alpha=0.7)
    axes.set_xlabel("rank")
    axes.set_ylabel("MiB (files of one rank)")
    return _svg(figure)


def target_rates(job: JobData, limit: int = 8) -> str | None:
    prom = job.prometheus
    if prom is None:
        return None
    series = [t for t in prom.targets if t.job_rate is not None and len(t.job_rate.times)]
    if not series:
        return None
    figure, axes = _figure()
    origin = job.window[0] if job.window else series[0].job_rate.times[0]
    for t in series[:limit]:
        scale = 1.0 if t.component == "mdt" else MIB
        unit = "ops/s" if t.component == "mdt" else "MiB/s"
        axes.plot(
            t.job_rate.times - origin, t.job_rate.values / scale, label=f"{t.target} ({unit})"
        )
    axes.set_xlabel("seconds since window start")
    axes.set_ylabel("job's rate")
    axes.legend(loc="upper right", fontsize=7, ncol=2)
    return _svg(figure)


def power(job: JobData) -> str | None:
    series = job.prometheus.power if job.prometheus else None
    if series is None or not len(series.times):
        return None
    figure, axes = _figure()
    origin = job.window[0] if job.window else series.times[0]
    axes.plot(series.times - origin, series.values, color="tab:red")
    axes.set_xlabel("seconds since window start")
    axes.set_ylabel("W (job's nodes)")
    return _svg(figure)


def history(rows: list[dict], titles: dict[str, str]) -> str | None:
    """Each figure of the runs (oldest first, this run last) divided by the earlier runs'
    median, on a log scale with the 0.5x and 2x lines of the regression rule."""
    if len(rows) < 2:
        return None
    figure, axes = _figure()
    x = np.arange(len(rows))
    drawn = False
    for name, title in titles.items():
        values = np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=float)
        earlier = values[:-1][np.isfinite(values[:-1])]
        median = float(np.median(earlier)) if len(earlier) else 0.0
        if median <= 0:
            continue
        relative = values / median
        relative[relative <= 0] = np.nan
        if np.isfinite(relative).any():
            axes.plot(x, relative, marker="o", label=title)
            drawn = True
    if not drawn:
        plt.close(figure)
        return None
    for level in (0.5, 2.0):
        axes.axhline(level, color="grey", linestyle="--", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_xticks(x, [r["job_id"] for r in rows], rotation=30, fontsize=7)
    axes.set_xlabel("run (oldest first; this run last)")
    axes.set_ylabel("x earlier runs' median")
    axes.legend(loc="upper left", fontsize=7, ncol=4)
    return _svg(figure)
