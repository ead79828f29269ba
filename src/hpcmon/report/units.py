"""Human-readable numbers shared by the text and HTML renderers."""

from __future__ import annotations

from datetime import UTC, datetime


def human_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    for prefix in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or prefix == "PiB":
            return f"{value:.0f} B" if prefix == "B" else f"{value:.1f} {prefix}"
        value /= 1024
    return f"{value:.1f} PiB"


def number(value: float | int | None, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and not value.is_integer():
        text = f"{value:.{digits}g}"
    else:
        text = f"{int(value):,}"
    return f"{text} {unit}".rstrip()


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


SUMMARY_ROWS = (
    ("Runtime", "runtime_seconds", lambda v: number(v, "s")),
    ("Ranks", "ranks", number),
    ("Bytes read", "bytes_read", human_bytes),
    ("Bytes written", "bytes_written", human_bytes),
    ("Read operations", "reads", number),
    ("Write operations", "writes", number),
    ("Mean read size", "mean_read_size_bytes", human_bytes),
    ("Mean write size", "mean_write_size_bytes", human_bytes),
    ("Metadata share of I/O time", "metadata_time_share", percent),
    ("Energy", "energy_kwh", lambda v: number(v, "kWh")),
    ("Energy per byte moved", "joules_per_byte", lambda v: number(v, "J/B")),
    ("Peak power", "power_peak_watts", lambda v: number(v, "W")),
    ("Mean power", "power_mean_watts", lambda v: number(v, "W")),
)


def utc_time(epoch: float | None) -> str:
    if epoch is None:
        return "n/a"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    """``1:02:03 (3,723 s)``: hours as a person reads them, and the seconds to compare."""
    if seconds is None:
        return "n/a"
    whole = round(abs(seconds))
    clock = f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
    return f"{'-' if seconds < 0 else ''}{clock} ({seconds:,.0f} s)"


def one_line(value: object) -> str:
    """A value as one line of text: the user's own text (a job name) may hold line breaks
    or other control characters, shown escaped (``\\n``)."""
    if value is None:
        return "n/a"
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
