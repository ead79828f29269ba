"""The per-job report (hpcmon-report) the epilog writes next to the points, and only once
InfluxDB acknowledged every one of them: a report of half the points would read as complete.
A failure here is one line, never the epilog's status."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import pwd
import secrets
import stat
from pathlib import Path

from hpcmon.post_job.delivery import WriterSettings
from hpcmon.post_job.epilog_config import REPORT_FORMATS, EpilogConfig
from hpcmon.post_job.hook import RunReport
from hpcmon.post_job.patterns import output_path
from hpcmon.post_job.slurm import SlurmJob
from hpcmon.post_job.writers import Deadline

log = logging.getLogger("hpcmon.post_job.epilog")


class ReportDirError(Exception):
    """Why the report must not be written where the config says (one line)."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_report_dir(directory: Path, group: int | None = None) -> int:
    """A descriptor of ``directory``, reached from ``/`` one component at a time without
    following a link, so a user cannot point the path (e.g. ``/scratch/{user}/...``)
    elsewhere, nor swap a component once it is checked: the report is then written relative
    to the descriptor. The directory itself must be owned by root (or by the hook's own user
    when it does not run as root) and not writable by others; a missing component is created
    only inside such a directory (or a sticky one, like /tmp), owned by root with ``group``
    (the job's) and mode 0750, else 0700: nobody outside the job's group can even list which
    jobs have reports."""
    parts = Path(os.path.abspath(directory)).parts[1:]
    if ".." in parts:
        raise ReportDirError(f"{directory}: '..' in the path; refused")
    fd = os.open("/", _DIR_FLAGS)
    here = Path("/")
    try:
        for name in parts:
            here = here / name
            parent, fd = fd, -1
            try:
                fd = _step(parent, name, here, group)
            finally:
                os.close(parent)
        info = os.fstat(fd)
        if info.st_uid not in (0, os.geteuid()):
            raise ReportDirError(f"{here}: owned by uid {info.st_uid}, not by root; refused")
        if info.st_mode & stat.S_IWOTH:
            mode = stat.S_IMODE(info.st_mode)
            raise ReportDirError(f"{here}: writable by others (mode {mode:o}); refused")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def _step(parent: int, name: str, path: Path, group: int | None) -> int:
    """The next component's descriptor, created when missing."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return _create(parent, name, path, group)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(parent, name):
            raise ReportDirError(f"{path}: a symbolic link; refused") from None
        raise ReportDirError(f"{path}: cannot open: {exc.strerror or exc}") from None


def _create(parent: int, name: str, path: Path, group: int | None) -> int:
    info = os.fstat(parent)
    trusted = info.st_uid in (0, os.geteuid()) and (
        not info.st_mode & stat.S_IWOTH or info.st_mode & stat.S_ISVTX
    )
    if not trusted:
        raise ReportDirError(f"{path}: missing, and its parent is not root's; refused")
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile: opened and checked like any other
    except OSError as exc:
        raise ReportDirError(f"{path}: cannot create: {exc.strerror or exc}") from None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise ReportDirError(f"{path}: cannot open: {exc.strerror or exc}") from None
    if os.fstat(fd).st_uid == os.geteuid():
        try:
            if group is not None and os.geteuid() == 0:
                os.fchown(fd, 0, group)
                os.fchmod(fd, 0o750)  # explicit: not the umask's
            else:
                os.fchmod(fd, 0o700)
        except OSError as exc:
            os.close(fd)
            raise ReportDirError(f"{path}: cannot set its owner: {exc.strerror or exc}") from None
    return fd


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        return False


def write_in_dir(
    directory: int, name: str, text: str, owner: tuple[int, int] | None = None
) -> None:
    """``name`` in the opened ``directory``, replaced atomically: a temporary file created
    there (never through a link) and renamed over it (a link there is replaced, not followed).
    Mode 0600, given to ``owner`` (uid, gid; when running as root): only the job's user can
    read its report, which names the job's files, sizes and paths."""
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o600)
            if owner is not None and os.geteuid() == 0:
                os.fchown(handle.fileno(), *owner)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise


def job_owner(job: SlurmJob) -> tuple[int, int] | None:
    """The job user's uid and gid (the passwd entry's group when Slurm gave none)."""
    if job.uid is None:
        return None
    if job.gid is not None:
        return int(job.uid), int(job.gid)
    try:
        return int(job.uid), pwd.getpwuid(int(job.uid)).pw_gid
    except KeyError:
        return None


def write_job_report(
    config: EpilogConfig,
    job: SlurmJob,
    settings: WriterSettings,
    run: RunReport,
    deadline: Deadline,
) -> Path | None:
    """The job's report, once InfluxDB acknowledged every point (a report of half the points
    would read as complete); a bonus: any failure is one line, never the epilog's status."""
    assert config.report is not None
    delivered = run.points and all(
        not (d.spooled or d.rejected or d.lost or d.problems) for d in run.destinations
    )
    if not delivered:
        log.warning(
            "job=%s report not written: the points are not all in InfluxDB yet "
            "(run hpcmon-report --job-id %s later)",
            job.job_id,
            job.job_id,
        )
        return None
    try:
        from hpcmon.report.api import write_report
        from hpcmon.report.influx import InfluxSettings
    except ImportError as exc:
        log.warning("job=%s report not written: %s (install hpcmon[report])", job.job_id, exc)
        return None
    suffix = REPORT_FORMATS[config.report.format]
    target = Path(output_path(config.report.dir, job, config.cluster)) / f"{job.job_id}.{suffix}"
    owner = job_owner(job)
    try:
        directory = open_report_dir(target.parent, owner[1] if owner else None)
    except ReportDirError as exc:
        log.warning("job=%s report not written: %s", job.job_id, exc)
        return None
    influx = InfluxSettings(
        v1_url=settings.v1_url,
        database=settings.v1_database,
        retention_policy=settings.v1_retention_policy,
        v2_url=settings.v2_url,
        org=settings.v2_org,
        bucket=settings.v2_bucket,
        token_file=config.writers.get("influx_v2", {}).get("token_file"),
    )
    try:
        written = write_report(
            job.job_id,
            config.cluster,
            influx,
            config.report.prometheus_url,
            target,
            deadline=deadline.end,
            fmt=config.report.format,
            write=lambda path, text: write_in_dir(directory, path.name, text, owner),
        )
    except Exception as exc:  # noqa: BLE001 - the points are in: a report failure is one line
        # the type only (the report is built from the job's points); details at debug level
        log.debug("job=%s report failed", job.job_id, exc_info=True)
        reason = str(exc) if isinstance(exc, TimeoutError) else type(exc).__name__
        log.warning("job=%s report not written: %s", job.job_id, reason)
        return None
    finally:
        os.close(directory)
    log.info("job=%s report written: %s", job.job_id, written)
    return written
