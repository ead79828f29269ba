"""The HTML report's pictures as inline SVG strings (matplotlib, no network, no files)."""

from __future__ import annotations

import html
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
    series = [
        (t, rate) for t in prom.targets if (rate := t.job_rate) is not None and len(rate.times)
    ]
    if not series:
        return None
    figure, axes = _figure()
    origin = job.window[0] if job.window else series[0][1].times[0]
    for t, rate in series[:limit]:
        scale = 1.0 if t.component == "mdt" else MIB
        unit = "ops/s" if t.component == "mdt" else "MiB/s"
        axes.plot(rate.times - origin, rate.values / scale, label=f"{t.target} ({unit})")
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


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
_LIMIT = 4.0  # log2 of the largest ratio drawn: 1/16x .. 16x, beyond is drawn at the edge


def history(rows: list[dict], titles: dict[str, str]) -> str | None:
    """Each figure of the runs (oldest first, this run last) divided by the earlier runs'
    median, on a log2 scale with the 0.5x and 2x lines of the regression rule. Written as
    SVG directly: a handful of lines does not need matplotlib's 0.1 s."""
    if len(rows) < 2:
        return None
    width, height, left, right, top, bottom = 640, 220, 52, 12, 28, 40
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + plot_w * i / (len(rows) - 1)

    def y(log2_ratio: float) -> float:
        clipped = min(max(log2_ratio, -_LIMIT), _LIMIT)
        return top + plot_h * (_LIMIT - clipped) / (2 * _LIMIT)

    parts = []
    for level, label, dash in ((1, "2x", "4 3"), (0, "1x", ""), (-1, "0.5x", "4 3"), (4, "16x", ""),
                               (-4, "1/16x", "")):  # fmt: skip
        style = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(level):.1f}" y2="{y(level):.1f}"'
            f' stroke="#bbb" stroke-width="0.8"{style}/>'
            f'<text x="{left - 4}" y="{y(level) + 3:.1f}" text-anchor="end">{label}</text>'
        )
    legend_x = left
    for (name, title), colour in zip(titles.items(), _PALETTE, strict=False):
        values = [r[name] for r in rows]
        earlier = [v for v in values[:-1] if v is not None]
        median = float(np.median(earlier)) if earlier else 0.0
        if median <= 0:
            continue
        points = [
            (x(i), y(float(np.log2(v / median))))
            for i, v in enumerate(values)
            if v is not None and v > 0
        ]
        if not points:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        dots = "".join(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5"/>' for px, py in points)
        parts.append(
            f'<g fill="{colour}" stroke="{colour}"><polyline points="{path}" fill="none"/>'
            f'<g stroke="none">{dots}</g></g>'
            f'<text x="{legend_x}" y="14" fill="{colour}">{html.escape(title)}</text>'
        )
        legend_x += 8 * len(title) + 20
    for i, row in enumerate(rows):
        parts.append(
            f'<text x="{x(i):.1f}" y="{height - bottom + 14}" text-anchor="middle">'
            f"{html.escape(str(row['job_id']))}</text>"
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        "run (oldest first; this run last), figure / earlier runs' median</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">'
        + "".join(parts)
        + "</svg>"
    )


_OPERATIONS = ("reads", "writes", "opens", "stats", "seeks", "mmaps", "fsyncs", "flushes")
_SIZE_BINS = ("0_100", "100_1k", "1k_10k", "10k_100k", "100k_1m", "1m_4m", "4m_10m")
_SIZE_BINS += ("10m_100m", "100m_1g", "1g_plus")
_SIZE_LABELS = ("0-100", "100-1K", "1K-10K", "10K-100K", "100K-1M", "1M-4M", "4M-10M")
_SIZE_LABELS += ("10M-100M", "100M-1G", "1G+")


def _prefix(module: str) -> str:
    return "mpiio" if module == "MPI-IO" else module.lower()


def _io_modules(job: JobData) -> list:
    d = job.darshan
    return [] if d is None else [t for _, t in sorted(d.modules.items()) if t.records > 0]


def io_cost(job: JobData) -> str | None:
    """Average seconds per process in reads, writes and metadata, per module, beside the
    run time (PyDarshan's "I/O cost"); a job whose logs recorded no I/O shows its run time."""
    d = job.darshan
    if d is None:
        return None
    figure, axes = _figure()
    processes = max(d.nprocs, 1)
    labels, parts = [], {"read": [], "write": [], "metadata": []}
    for totals in _io_modules(job):
        p = _prefix(totals.module)
        labels.append(totals.module)
        for kind, name in (("read", "read"), ("write", "write"), ("metadata", "meta")):
            parts[kind].append((totals.counter(f"{p}_f_{name}_time") or 0.0) / processes)
    labels.append("run time")
    for values in parts.values():
        values.append(0.0)
    left = np.zeros(len(labels))
    for (kind, values), color in zip(
        parts.items(), ("tab:blue", "tab:orange", "tab:green"), strict=True
    ):
        axes.barh(labels, values, left=left, label=kind, color=color)
        left += np.array(values)
    runtime = np.zeros(len(labels))
    runtime[-1] = d.runtime
    axes.barh(labels, runtime, color="tab:gray", label="run time")
    axes.set_xlabel("seconds per process (average)")
    if len(labels) == 1:
        axes.set_title("no I/O module recorded any I/O", fontsize=8)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return _svg(figure)


def operation_counts(job: JobData) -> str | None:
    """Calls per operation, one bar group per operation, one bar per module."""
    modules = _io_modules(job)
    found = []
    for totals in modules:
        p = _prefix(totals.module)
        counts = [totals.counter(f"{p}_{op}") for op in _OPERATIONS]
        if totals.module == "MPI-IO":
            counts[0] = totals.reads
            counts[1] = totals.writes
            counts[2] = sum(totals.counter(f"mpiio_{k}_opens") or 0.0 for k in ("indep", "coll"))
        if any(counts):
            found.append((totals.module, [c or 0.0 for c in counts]))
    if not found:
        return None
    figure, axes = _figure()
    x = np.arange(len(_OPERATIONS))
    width = 0.8 / len(found)
    for i, (module, counts) in enumerate(found):
        axes.bar(x + i * width, counts, width=width, label=module)
    axes.set_xticks(x + 0.4 - width / 2, _OPERATIONS)
    axes.set_ylabel("calls")
    axes.set_yscale("symlog")
    axes.legend(loc="upper right", fontsize=7, ncol=3)
    return _svg(figure)


def access_sizes(job: JobData) -> list[tuple[str, str]]:
    """(module, picture) of each module's access-size histogram (reads and writes)."""
    out = []
    for totals in _io_modules(job):
        p = _prefix(totals.module)
        agg = "" if totals.module in ("POSIX", "DFS", "DAOS") else "agg_"
        reads = [totals.counter(f"{p}_size_read_{agg}{b}") for b in _SIZE_BINS]
        writes = [totals.counter(f"{p}_size_write_{agg}{b}") for b in _SIZE_BINS]
        if None in reads or None in writes or not any(reads + writes):
            continue
        figure, axes = _figure()
        x = np.arange(len(_SIZE_BINS))
        axes.bar(x - 0.2, reads, width=0.4, label="read")
        axes.bar(x + 0.2, writes, width=0.4, label="write")
        axes.set_xticks(x, _SIZE_LABELS, fontsize=7)
        axes.set_xlabel("access size (bytes)")
        axes.set_ylabel("operations")
        axes.legend(loc="upper right", fontsize=7)
        out.append((totals.module, _svg(figure)))
    return out
