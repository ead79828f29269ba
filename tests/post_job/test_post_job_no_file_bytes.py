"""No reader quotes its input (issue 22): real inputs with a token written over a random part,
or put in a line of its own, give error and warning lines that never carry any piece of it.
The points may: a name in the data is data."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.darshan import collect_darshan
from hpcmon.post_job.geopm_report import collect_geopm_report
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.recorder import collect_recorder
from hpcmon.post_job.viztracer import collect_viztracer

DATA = Path(__file__).parents[1] / "data"
TOKEN = b"QzXk7v9TOKENw2Lp4d"
JOB = JobContext("5", "c")
INPUTS = {
    "darshan-text": DATA / "darshan" / "text" / "mpi-io-test-x86_64-3.5.0.txt",
    "darshan-log": DATA / "darshan" / "logs" / "mpi-io-test-x86_64-3.4.6.darshan",
    "geopm-yaml": DATA / "geopm_report" / "geopm-2.0.0+dev39x_test_sleep_region_report.yaml",
    "geopm-text": DATA / "geopm_report" / "geopm-1.0.0+dev30_pre-yaml-text-format.report",
    "geopm-session": DATA / "geopm_report" / "geopmsession_report_2024-08-14_single_host.yaml",
    "geopm-csv": DATA / "geopm_report" / "geopmsession_report_2025-05-16_single_host.csv",
    "viztracer": DATA / "viztracer" / "deep.json",
}


def read(kind: str, path: Path) -> SourceOutput:
    if kind == "darshan-text":
        return collect_darshan([], [path], JOB)
    if kind == "darshan-log":
        return collect_darshan([path], [], JOB)
    if kind == "viztracer":
        return collect_viztracer([path], JOB)
    if kind == "recorder":
        return collect_recorder([path], JOB)
    return collect_geopm_report([path], JOB)


def pieces(token: bytes) -> list[str]:
    """Every 6-character piece of the token: a quote cut short still shows one."""
    text = token.decode()
    return [text[i : i + 6] for i in range(len(text) - 5)]


def assert_quiet(output: SourceOutput) -> None:
    lines = "\n".join(output.errors + output.warnings)
    leaked = [piece for piece in pieces(TOKEN) if piece in lines]
    assert not leaked, lines


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(sorted(INPUTS)),
    where=st.floats(0, 1),
    line=st.booleans(),
    cut=st.integers(0, 64),
)
def test_a_token_anywhere_in_an_input_never_reaches_a_message(
    kind: str, where: float, line: bool, cut: int
) -> None:
    original = INPUTS[kind].read_bytes()
    at = int(where * len(original))
    if line:  # a line of its own, or one that starts with it, at a line boundary
        at = original.rfind(b"\n", 0, at) + 1
        data = original[:at] + TOKEN + b" " * (cut % 3) + b"\n" + original[at:]
    else:  # written over the bytes there (and ``cut`` more removed)
        data = original[:at] + TOKEN + original[at + len(TOKEN) + cut :]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / INPUTS[kind].name
        path.write_bytes(data)
        assert_quiet(read(kind, path))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["VERSION", "recorder.mt", "0.cfg", "0.mt"]), where=st.floats(0, 1))
def test_a_token_in_a_recorder_trace_never_reaches_a_message(name: str, where: float) -> None:
    source = DATA / "recorder" / "v3.0.0"
    trace = next(p.parent for p in sorted(source.rglob("VERSION")))
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory) / trace.name
        shutil.copytree(trace, copy)
        target = next(iter(sorted(copy.rglob(name))), copy / "VERSION")
        original = target.read_bytes()
        at = int(where * len(original))
        target.write_bytes(original[:at] + TOKEN + original[at + len(TOKEN) :])
        assert_quiet(read("recorder", copy))
