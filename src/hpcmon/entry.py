"""Console-script entry points. A node installs only its role's extra (`hpcmon[exporter]`,
`hpcmon[post-job]`, ...); a command run without its extra says which one to install, in one
line, with exit status 2, instead of an ImportError traceback."""

from __future__ import annotations

import importlib
import sys

# command -> (module with main(), the extra that brings its dependencies)
COMMANDS = {
    "hpcmon-exporter": ("hpcmon.exporter.cli", "exporter"),
    "hpcmon-post-job": ("hpcmon.post_job.cli", "post-job"),
    "hpcmon-dashboards": ("hpcmon.dashboards.cli", "dashboards"),
    "hpcmon-report": ("hpcmon.report.cli", "report"),
}
_OWN_PACKAGES = {"hpcmon"}


def missing_package(exc: BaseException) -> str | None:
    """The third-party package an extra would bring, when ``exc`` says it is not installed.
    A command's catch-all for unforeseen errors re-raises these, so ``run`` names the extra."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    missing = (exc.name or "").split(".")[0]
    return missing if missing and missing not in _OWN_PACKAGES else None


def run(command: str) -> int:
    """Import the command and run it; a module missing at import time or later, during the
    work (sources import their libraries only when used), is the same one line."""
    module_name, extra = COMMANDS[command]
    try:
        return importlib.import_module(module_name).main()
    except ModuleNotFoundError as exc:
        missing = missing_package(exc)
        if missing is None:  # hpcmon itself is broken, not an extra
            print(f"{command}: hpcmon is incompletely installed: {exc}", file=sys.stderr)
            return 2
        print(
            f"{command}: the Python package {missing!r} is missing: "
            f"install the role's extra, e.g. pip install 'hpcmon[{extra}]'",
            file=sys.stderr,
        )
        return 2


def exporter() -> int:
    return run("hpcmon-exporter")


def post_job() -> int:
    return run("hpcmon-post-job")


def dashboards() -> int:
    return run("hpcmon-dashboards")


def report() -> int:
    return run("hpcmon-report")
