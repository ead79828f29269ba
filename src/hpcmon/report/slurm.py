"""Slurm's view of the finished job (the hook's ``slurm_job`` point) as the report shows it:
how the job ended in words, its JSON and its rows in the text and HTML. Plain Python: the
dashboards name the signals with the same table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcmon.report.units import duration, number, one_line, utc_time

if TYPE_CHECKING:
    from hpcmon.report.model import SlurmView

# Linux's signal numbers (x86-64 and arm64), where Slurm's jobs run; fixed here, not read from
# the ``signal`` module, so a report or dashboard made on another system names them the same.
SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT",
    19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU",
    25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR",
    31: "SIGSYS",
}  # fmt: skip
NO_IO_LOGS = (
    "No I/O logs were found for this job (no Darshan, Recorder, VizTracer or GEOPM points)."
)


def signal_name(number: int) -> str:
    """``9 (SIGKILL)``, or the bare number for one Linux does not name."""
    name = SIGNALS.get(number)
    return f"{number} ({name})" if name else str(number)


def exit_status(code: int | None, signal: int | None) -> str | None:
    """How the job ended, in words: ``0 (success)``, ``exit 3``, ``killed by signal 9
    (SIGKILL)`` (both when Slurm gave both); None when Slurm told neither."""
    if code is None and signal is None:
        return None
    said = [f"killed by signal {signal_name(signal)}"] if signal else []
    said += [f"exit {code}"] if code else []
    if said:
        return ", ".join(said)
    return "0 (success)" if code == 0 else "no signal (exit code unknown)"


def slurm_json(view: SlurmView | None) -> dict | None:
    if view is None:
        return None
    return {
        "job_id": view.job_id,
        "job_name": view.job_name,
        "user": view.user,
        "account": view.account,
        "partition": view.partition,
        "nodelist": view.nodelist,
        "num_nodes": view.num_nodes,
        "exit_code": view.exit_code,
        "exit_signal": view.exit_signal,
        "exit_status": exit_status(view.exit_code, view.exit_signal),
        "failed": view.failed,
        "start": view.start,
        "end": view.end,
        "elapsed_seconds": view.elapsed,
    }


# (label, JSON key, formatter) of the text and HTML Slurm section, in order
ROWS = (
    ("Job name", "job_name", one_line),
    ("User", "user", one_line),
    ("Account", "account", one_line),
    ("Partition", "partition", one_line),
    ("Nodes", "nodelist", one_line),
    ("Number of nodes", "num_nodes", number),
    ("Exit status", "exit_status", one_line),
    ("Start", "start", utc_time),
    ("End", "end", utc_time),
    ("Elapsed", "elapsed_seconds", duration),
)


def slurm_rows(report: dict) -> list[tuple[str, str]]:
    """(label, text) of the report's Slurm section; none for a job without Slurm's view."""
    slurm = report["slurm"]
    if slurm is None:
        return []
    return [(label, fmt(slurm[key])) for label, key, fmt in ROWS]


def io_logs_found(report: dict) -> bool:
    sources = report["sources"]
    return bool(sources["darshan"] or sources["geopm"] or sources["functions"])
