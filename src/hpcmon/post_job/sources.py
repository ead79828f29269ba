"""config -> sources: call each configured source's ``collect_<source>`` entry.

Sources are imported lazily: a source package that is missing or broken costs only its own
data, with a one-line error naming it, and the job's other sources are still collected.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpcmon.entry import missing_package
from hpcmon.post_job import files
from hpcmon.post_job.model import JobContext, SourceOutput

log = logging.getLogger("hpcmon.post_job")

# source name -> (module, entry function) of postjob-contract.md
SOURCE_ENTRIES: dict[str, tuple[str, str]] = {
    "darshan": ("hpcmon.post_job.darshan", "collect_darshan"),
    "recorder": ("hpcmon.post_job.recorder", "collect_recorder"),
    "viztracer": ("hpcmon.post_job.viztracer", "collect_viztracer"),
    "geopm_report": ("hpcmon.post_job.geopm_report", "collect_geopm_report"),
}


@dataclass
class SourceRequest:
    """One source call: ``entry(*inputs, job, **options)``."""

    name: str
    inputs: tuple[Any, ...]
    options: dict[str, Any] = field(default_factory=dict)
    # directories the inputs must stay in once links are followed (checked when reading as
    # the job's user; see reading.py)
    roots: tuple[str, ...] = ()


# modules a source imports only when it reads: imported before a reading child drops to the
# job's user, who may not be allowed to read the installed code
SOURCE_PRELOADS: dict[str, tuple[str, ...]] = {
    "darshan": ("darshan", "darshan.backend.cffi_backend", "darshan.report"),
}


def preload(name: str) -> None:
    """Import what the source will need (ImportError when it cannot be)."""
    for module in SOURCE_PRELOADS.get(name, ()):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - one line, as for the entry itself
            if missing_package(exc):
                raise  # the post-job extra is not installed: the command says so (hpcmon.entry)
            raise ImportError(f"{module} cannot be imported: {type(exc).__name__}") from exc


def load_entry(name: str) -> Callable[..., SourceOutput]:
    """The source's entry function; ImportError with a one-line reason when unavailable."""
    module_name, function_name = SOURCE_ENTRIES[name]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a broken package must not stop the others
        if missing_package(exc):
            raise  # the post-job extra is not installed: the command says so (hpcmon.entry)
        raise ImportError(f"{module_name} cannot be imported: {type(exc).__name__}: {exc}") from exc
    entry: Callable[..., SourceOutput] | None = getattr(module, function_name, None)
    if not callable(entry):
        raise ImportError(f"{module_name} has no {function_name}()")
    return entry


def run_source(request: SourceRequest, job: JobContext) -> SourceOutput:
    """Call one source, turning every failure into an error line for that source only."""
    try:
        entry = load_entry(request.name)
    except ImportError as exc:
        if missing_package(exc):
            raise  # the extra is not installed: one line for the command, not per source
        return SourceOutput(errors=[f"source not available: {exc}"])
    try:
        output = entry(*request.inputs, job, **request.options)
    except Exception as exc:  # noqa: BLE001 - contract says sources never raise; be safe anyway
        if missing_package(exc):
            raise  # a library of the post-job extra imported late, not installed
        log.debug("source %s raised", request.name, exc_info=True)
        # the type only: the message may quote the file (files.unexpected_error)
        return SourceOutput(errors=[files.unexpected_error("failed", "reading", exc)])
    if not isinstance(output, SourceOutput):
        return SourceOutput(errors=[f"returned {type(output).__name__}, not SourceOutput"])
    return output


def collect(
    requests: Sequence[SourceRequest],
    job: JobContext,
    read: Callable[[SourceRequest, JobContext], SourceOutput] = run_source,
) -> SourceOutput:
    """Every request's output, each source's errors prefixed with its name; ``read`` runs one
    request (in this process by default; reading.py reads in a bounded child)."""
    combined = SourceOutput()
    for request in requests:
        output = read(request, job)
        log.info(
            "job=%s source=%s points=%d errors=%d",
            job.job_id,
            request.name,
            len(output.points),
            len(output.errors),
        )
        combined.points.extend(output.points)
        combined.errors.extend(f"{request.name}: {error}" for error in output.errors)
        for warning in output.warnings:
            log.warning("job=%s %s: %s", job.job_id, request.name, warning)
    return combined
