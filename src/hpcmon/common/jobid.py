"""Job id handling shared by every source: Lustre's quoting, site patterns, Slurm."""

from __future__ import annotations

import os
import re

_HEX_ESCAPE = re.compile(rb"\\x([0-9A-Fa-f]{2})")


def decode_lustre_jobid(raw: str) -> str:
    """Undo Lustre 2.15.2+ quoting: strip the double quotes and resolve ``\\xHH`` escapes.

    Older releases print ids raw (spaces included), so an unquoted id is only stripped.
    Bytes that are not valid UTF-8 after unescaping are kept as U+FFFD rather than failing.
    """
    text = raw.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    if "\\x" not in text:
        return text
    data = _HEX_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), text.encode("utf-8", "replace"))
    return data.decode("utf-8", "replace")


class JobIdPattern:
    """A site's job id layout as a regex with named groups that become extra labels or tags.

    Example: ``(?P<slurm_job>\\d+):(?P<uid>\\d+):(?P<host>.+)`` for ``%j:%u:%H``.
    Ids that do not match get empty values, so every series of a family has the same labels.
    """

    def __init__(self, pattern: str | None) -> None:
        self.regex = re.compile(pattern) if pattern else None
        self.names: tuple[str, ...] = tuple(self.regex.groupindex) if self.regex else ()
        self._cache: dict[str, tuple[str, ...]] = {}

    def labels(self, jobid: str) -> tuple[str, ...]:
        if self.regex is None:
            return ()
        hit = self._cache.get(jobid)
        if hit is not None:
            return hit
        match = self.regex.fullmatch(jobid)
        if match is None:
            values = ("",) * len(self.names)
        else:
            values = tuple(match.group(name) or "" for name in self.names)
        if len(self._cache) > 200_000:
            self._cache.clear()
        self._cache[jobid] = values
        return values


def slurm_job_id(environ: dict[str, str] | None = None) -> str | None:
    """The job id Slurm gives prolog/epilog scripts and job steps, or None outside Slurm."""
    env = os.environ if environ is None else environ
    for key in ("SLURM_JOB_ID", "SLURM_JOBID"):
        value = env.get(key, "").strip()
        if value:
            return value
    return None


# A job id as schedulers write them (Slurm 12345, 12345_7, 12345+1; PBS 123.server; LSF
# 123[4]): it becomes a tag and part of file names, so nothing that could leave a directory
# ("/", "..", NUL) or break a line is accepted.
_JOB_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.+\-\[\]]{0,126}[A-Za-z0-9\]])?")
_SLURM_JOB_ID = re.compile(r"[0-9]{1,20}")
# POSIX portable user names (plus the trailing $ of Samba machine accounts)
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
# Slurm node, partition and account names: letters, digits and a few marks (the epilog's
# environment and squeue's output are refused where they hold anything else)
SLURM_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def job_id_problem(text: str) -> str | None:
    """Why ``text`` cannot be a job id (None when it can)."""
    if not _JOB_ID.fullmatch(text) or ".." in text:
        return (
            f"{text[:80]!r} is not a job id (letters, digits and _ . + - [ ] only, "
            "at most 128 characters, no '..')"
        )
    return None


def slurm_job_id_problem(text: str) -> str | None:
    """Why a SLURM_JOB_ID value is not one (Slurm's job ids are decimal numbers)."""
    if not _SLURM_JOB_ID.fullmatch(text):
        return f"SLURM_JOB_ID={text[:80]!r} is not a Slurm job id (a decimal number)"
    return None


def user_name_problem(text: str) -> str | None:
    if not USER_NAME.fullmatch(text):
        return f"{text[:80]!r} is not a user name"
    return None
