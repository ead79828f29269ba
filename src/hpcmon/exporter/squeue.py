"""Slurm's running and completing jobs, from one ``squeue`` call: typed records, nothing of
Prometheus.

squeue prints one record per job in a fixed output format. The job name is the user's own
text and may hold any byte, the separator and new lines included, so each record is framed
by a marker chosen at random for each call (``<marker>%A|%u|%a|%P|%T|%j<marker>``): no name
written before the call can end a record early or make one up, and the name is the last
field, so a ``|`` in it cannot shift Slurm's own columns. ``squeue --json`` is not used: in
Slurm 22.05 it ignores ``--states`` and lists every job, pending ones included, with about
100 fields each (3.4 kB a job here), where this format prints about 100 bytes.

The job id is ``%A``, Slurm's numeric job id: the ``SLURM_JOB_ID`` of a job and of each array
task, which is what Lustre's jobstats record (``jobid_var=SLURM_JOB_ID``), not ``%i``'s
``<array id>_<task>`` form. Each component of a heterogeneous job is listed with its own id.
"""

from __future__ import annotations

import os
import re
import secrets
import selectors
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress
from typing import NamedTuple

from hpcmon.common.jobid import SLURM_NAME, USER_NAME
from hpcmon.common.process import kill_group

STATES = ("RUNNING", "COMPLETING")  # what is asked for; squeue may print a finer state
FIELDS = "%A|%u|%a|%P|%T|%j"  # job id | user | account | partition | state | name (the rest)
MAX_JOB_NAME = 64  # characters kept of a job name (Slurm allows 1024): the label stays short
MAX_ANSWER = 64 << 20  # bytes; the answer for 10,000 jobs is about 1 MB
# job id | user name, or the uid of a user without one | account | partition | state | name
_RECORD = re.compile(
    rf"([0-9]{{1,20}})\|({USER_NAME.pattern}|[0-9]{{1,10}})\|(\(null\)|{SLURM_NAME.pattern})"
    rf"\|({SLURM_NAME.pattern})\|([A-Z_]{{1,32}})\|(.*)",
    re.DOTALL,
)
_MAX_RECORD = 1024  # bytes: the longest fixed fields (about 350) and a name of MAX_JOB_NAME


class SlurmJobState(NamedTuple):
    """One job as squeue lists it; every field is the text Slurm printed (the name cut to
    MAX_JOB_NAME characters, bytes that are not UTF-8 replaced by U+FFFD). A tuple: made and
    read at C speed, 10,000 of them at every sample."""

    jobid: str
    user: str
    account: str  # "" when the job has none (squeue prints "(null)")
    partition: str
    job_name: str
    state: str  # as Slurm prints it: RUNNING, COMPLETING, or a finer one (CONFIGURING, ...)


@dataclass(frozen=True, slots=True)
class SqueueAnswer:
    jobs: tuple[SlurmJobState, ...]
    bad_records: int  # pieces of the answer that are not a record in FIELDS (not kept)
    # each job's record as squeue printed it: the same text is the same job
    records: tuple[bytes, ...] = field(default=(), compare=False)
    # each record's job, so that the next answer parses only the records that changed
    by_record: dict[bytes, SlurmJobState | None] = field(default_factory=dict, compare=False)


class SqueueError(Exception):
    """squeue gave no usable answer: why, in one line."""


def new_marker() -> str:
    """Letters and digits only: squeue copies them as they are."""
    return "hpcmon" + secrets.token_hex(8)


def squeue_command(squeue: str, marker: str) -> list[str]:
    return [
        squeue,
        "--noheader",
        "--array",  # one line per array task, never "1234_[5-9]"
        f"--states={','.join(STATES)}",
        f"--format={marker}{FIELDS}{marker}",
    ]


def parse_squeue(
    answer: bytes, marker: bytes, known: dict[bytes, SlurmJobState | None] | None = None
) -> SqueueAnswer:
    """The records of an answer to ``squeue_command``; never raises. Anything between two
    records other than the line break, a record cut short or malformed, counts as bad.
    ``known``: the last answer's ``by_record`` (most jobs outlive an interval)."""
    pieces = answer.split(marker)
    bad = 1 if pieces[0] else 0  # before the first record
    if len(pieces) % 2 == 0:  # the last record has no end marker: cut short
        pieces.pop()
        bad += 1
    separators = pieces[2::2]
    bad += len(separators) - separators.count(b"\n")  # something else between two records
    records = pieces[1::2]
    # Whole-list operations: 10,000 records at every sample, in the scrapes' process.
    found = list(map((known or {}).get, records))
    for index in [i for i, job in enumerate(found) if job is None]:
        found[index] = parse_record(records[index])
    jobs = tuple(filter(None, found))  # a job is a non-empty tuple, a bad record None
    bad += len(found) - len(jobs)
    by_record = dict(zip(records, found, strict=True))  # None: parsed again next time
    return SqueueAnswer(jobs, bad, tuple(compress(records, found)), by_record)


def parse_record(record: bytes) -> SlurmJobState | None:
    """One record in FIELDS, or None when it is not one."""
    # The fixed fields are ASCII and '|' never ends a UTF-8 sequence: decoding the record
    # whole decodes the name as decoding it alone would. Past _MAX_RECORD the name is cut.
    match = _RECORD.fullmatch(record[:_MAX_RECORD].decode("utf-8", "replace"))
    if match is None:
        return None
    jobid, user, account, partition, state, name = match.groups()
    return SlurmJobState(
        jobid,
        user,
        "" if account == "(null)" else account,
        partition,
        name[:MAX_JOB_NAME],
        state,
    )


def job_name(raw: bytes) -> str:
    """The user's name for the job as label text: any bytes, cut to MAX_JOB_NAME characters."""
    return raw[: MAX_JOB_NAME * 4].decode("utf-8", "replace")[:MAX_JOB_NAME]


def read_squeue(
    squeue: str,
    timeout: float,
    environ: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    known: dict[bytes, SlurmJobState | None] | None = None,
) -> SqueueAnswer:
    """Run squeue once, at most ``timeout`` seconds (then it is killed, with anything it
    started), and parse its answer. SqueueError when it cannot run, exits with an error,
    answers nothing that is a record, or says more than MAX_ANSWER bytes."""
    marker = new_marker()
    out, err, code = _run(squeue_command(squeue, marker), timeout, environ, cancel)
    if code != 0:
        message = _last_line(err)
        raise SqueueError(f"squeue exited with {code}" + (f": {message}" if message else ""))
    answer = parse_squeue(out, marker.encode(), known)
    if answer.bad_records and not answer.jobs:
        raise SqueueError(
            f"squeue's answer is not in the format asked for ({answer.bad_records} bad records)"
        )
    return answer


def _run(
    command: list[str],
    timeout: float,
    environ: Mapping[str, str] | None,
    cancel: threading.Event | None,
) -> tuple[bytes, bytes, int]:
    """stdout, stderr (its first 4 kB) and exit code; output read as it comes, so a hung or
    endless squeue is stopped at the deadline or MAX_ANSWER, whatever it prints."""
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ if environ is None else environ),
            start_new_session=True,  # killed with what it started
        )
    except OSError as exc:
        raise SqueueError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None  # both piped
    deadline = time.monotonic() + timeout
    out: list[bytes] = []
    err: list[bytes] = []
    size = 0
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ, out)
            selector.register(proc.stderr, selectors.EVENT_READ, err)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SqueueError(f"no answer within {timeout:g} s")
                if cancel is not None and cancel.is_set():
                    raise SqueueError("stopped")
                for key, _ in selector.select(min(left, 0.5)):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    if key.data is out:
                        size += len(chunk)
                        if size > MAX_ANSWER:
                            raise SqueueError(f"squeue's answer is longer than {MAX_ANSWER} bytes")
                        out.append(chunk)
                    elif sum(map(len, err)) < 4096:
                        err.append(chunk)
        code = proc.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise SqueueError(f"no answer within {timeout:g} s") from None
    finally:
        kill_group(proc)
        proc.stdout.close()
        proc.stderr.close()
    return b"".join(out), b"".join(err), code


def _last_line(stderr: bytes) -> str:
    """squeue's own last message (e.g. "Unable to contact slurm controller"), one short line."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return "".join(ch if ch.isprintable() else "?" for ch in last[:200])
