"""squeue stand-ins for the Slurm collector's failure modes and its benchmark: small programs
(real processes) that answer as squeue does, or fail as it can."""

from __future__ import annotations

import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"

RECORDED = DATA / "slurm" / "squeue_running.out"
RECORDED_MARKER = b"hpcmon5ca1ab1e5ca1ab1e"  # the marker RECORDED was asked for with

# Prints the recorded answer file (argv[0]'s neighbour ANSWER) with the marker of this call,
# taken from --format=<marker>...<marker>, as squeue would.
REPLAYING = """#!{python}
import sys
fmt = next(a for a in sys.argv if a.startswith("--format="))[len("--format="):]
marker = fmt[: fmt.index("%")].encode()
data = open({answer!r}, "rb").read()
sys.stdout.buffer.write(data.replace({recorded!r}, marker))
"""


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def replaying_squeue(path: Path, answer: Path = RECORDED) -> Path:
    """A squeue that prints ``answer`` (an answer recorded with RECORDED_MARKER)."""
    return write_script(
        path,
        REPLAYING.format(python=sys.executable, answer=str(answer), recorded=RECORDED_MARKER),
    )


def failing_squeue(path: Path) -> Path:
    """Exits 1 with the message squeue prints when slurmctld does not answer."""
    return write_script(
        path,
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller "
        "(connect failure)' >&2\nexit 1\n",
    )


def hanging_squeue(path: Path, pid_file: Path) -> Path:
    """Never answers: a shell that waits for a child of its own (which keeps the pipe open);
    the child's pid goes to ``pid_file``."""
    return write_script(path, f"#!/bin/sh\nsleep 3600 &\necho $! > {pid_file}\nwait\n")


def garbage_squeue(path: Path) -> Path:
    """Exits 0 with text that is not in the format asked for."""
    return write_script(
        path, "#!/bin/sh\nprintf 'JOBID PARTITION NAME\\n  123 debug  x\\n\\377\\000\\n'\n"
    )
