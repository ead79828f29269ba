"""Human-readable numbers shared by the text and HTML renderers."""

from __future__ import annotations


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
