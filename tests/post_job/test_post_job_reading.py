"""The reading child (post_job/reading.py): what it sends back, what the parent accepts and
writes, and what a child that dies costs (only the inputs that kill it)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job import files, sources
from hpcmon.post_job.model import JobContext, SourceOutput
from hpcmon.post_job.points import FieldValue, Point
from hpcmon.post_job.reading import (
    ReadPolicy,
    _decode,
    collect_isolated,
    input_problem,
    resolved_root,
)
from hpcmon.post_job.sources import SourceRequest

JOB = JobContext("77", "c1")
MODULE = "hpcmon_test_reading_source"


def collect(paths, job, *, out: Path | None = None, stray: Path | None = None) -> SourceOutput:
    """A source that reads each input's text; "crash" kills it, "spin" burns CPU forever,
    "big" allocates 4 GiB; writes ``out`` (and a numbered sibling) and ``stray``."""
    output = SourceOutput()
    for path in paths:
        text = Path(path).read_text()
        if "crash" in text:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "spin" in text:
            while True:
                pass
        if "big" in text:
            try:
                bytearray(4 << 30)
            except MemoryError as exc:
                output.errors.append(files.unexpected_error(path, "reading", exc))
                continue
        output.points.append(Point("t", {"jobid": job.job_id, "in": Path(path).name}, {"v": 1}, 1))
    for target in (out, out.with_name(f"{out.stem}.2{out.suffix}") if out else None, stray):
        if target is not None:
            with files.replaced_atomically(target) as handle:
                handle.write(f"{len(paths)} inputs\n")
    return output


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> str:
    module = types.ModuleType(MODULE)
    monkeypatch.setattr(module, "collect", collect, raising=False)
    monkeypatch.setitem(sys.modules, MODULE, module)
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "geopm_report", (MODULE, "collect"))
    return "geopm_report"


def inputs(tmp_path: Path, **texts: str) -> list[Path]:
    paths = []
    for name, text in texts.items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    return paths


def test_a_crashing_input_costs_only_itself(tmp_path: Path, source: str) -> None:
    paths = inputs(tmp_path, a="fine", b="crash", c="fine too")
    output = collect_isolated([SourceRequest(source, (paths,))], JOB, ReadPolicy(256))
    assert sorted(p.tags["in"] for p in output.points) == ["a", "c"]
    assert output.errors == [
        f"geopm_report: {paths[1]}: not read: the reading process crashed with signal SIGSEGV "
        "(the memory limit of 256 MiB)"
    ]


def test_cpu_time_is_bounded_by_the_time_limit(tmp_path: Path, source: str) -> None:
    paths = inputs(tmp_path, spin="spin")
    output = collect_isolated([SourceRequest(source, (paths,))], JOB, ReadPolicy(256, 1.0))
    assert output.points == []
    assert output.errors == [
        f"geopm_report: {paths[0]}: not read: the reading process was stopped at the CPU time "
        "limit of 1 s"
    ]


def test_memory_over_the_limit_is_one_line_and_the_rest_is_read(
    tmp_path: Path, source: str
) -> None:
    paths = inputs(tmp_path, big="big", small="small")
    output = collect_isolated([SourceRequest(source, (paths,))], JOB, ReadPolicy(128))
    assert [p.tags["in"] for p in output.points] == ["small"]
    assert output.errors == [
        f"geopm_report: {paths[0]}: not read: over the memory limit of 128 MiB while reading"
    ]


def test_the_parent_writes_only_the_named_outputs(tmp_path: Path, source: str) -> None:
    out, stray = tmp_path / "out" / "clean.json", tmp_path / "stray.txt"
    out.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out.symlink_to(victim)  # a link at the target is replaced, not followed
    request = SourceRequest(source, (inputs(tmp_path, a="x"),), {"out": out, "stray": None})
    request.options["stray"] = str(stray)  # not a Path option: not an output
    output = collect_isolated([request], JOB, ReadPolicy(256))
    assert out.read_text() == "1 inputs\n" and not out.is_symlink()
    assert victim.read_text() == "keep"
    assert (out.parent / "clean.2.json").read_text() == "1 inputs\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not stray.exists()
    assert output.errors == [f"geopm_report: {stray}: not an output of this source; not written"]


def test_refusals_name_the_file_and_the_reason(tmp_path: Path) -> None:
    inside, outside = tmp_path / "logs", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("TOKEN")
    (inside / "link").symlink_to(outside / "secret")
    (inside / "own").write_text("data")
    uid = os.geteuid()
    assert input_problem(inside / "own", [str(inside)], uid) is None
    assert input_problem(inside / "link", [str(inside)], uid) == (
        "a symbolic link leading out of the configured directories"
    )
    missing = input_problem(inside / "missing", [str(inside)], uid)
    assert missing is not None and missing.startswith("cannot look at it")
    if uid != 0:
        foreign = input_problem(inside / "own", [str(inside)], uid + 1)
        assert foreign is not None and "owned by uid" in foreign


def test_a_configured_directory_its_user_turned_into_a_link_is_not_followed(tmp_path):
    """``/jobs/{jobid}/`` made a link to elsewhere by the job's user moved the allowed
    directory there: the link is not followed (only root's are), and the refusal says why."""
    elsewhere, jobs = tmp_path / "elsewhere", tmp_path / "jobs"
    elsewhere.mkdir()
    jobs.mkdir()
    (elsewhere / "secret").write_text("TOKEN")
    link = jobs / "123"
    link.symlink_to(elsewhere)
    if os.geteuid() == 0:
        os.lchown(link, 12345, 12345)  # as the job's user would have made it
    owner = os.lstat(link).st_uid
    problem = input_problem(link / "secret", [f"{link}/"], os.geteuid())
    assert problem == (
        f"the configured directory {link}/ leads through {link}, a symbolic link owned by uid "
        f"{owner} (only root's links are followed there)"
    )
    (jobs / "124").mkdir()  # the same pattern for a job whose directory is a directory
    (jobs / "124" / "log").write_text("data")
    assert input_problem(jobs / "124" / "log", [f"{link}/", f"{jobs}/124/"], os.geteuid()) is None
    # a directory of another pattern that cannot be resolved (the user put a file where it
    # would be) costs only what would be under it, not the inputs of the other patterns
    (jobs / "125").write_text("a file")
    assert (
        input_problem(jobs / "124" / "log", [f"{jobs}/125/sub/", f"{jobs}/124/"], os.geteuid())
        is None
    )
    assert input_problem(jobs / "125" / "sub" / "log", [f"{jobs}/125/sub/"], os.geteuid()) == (
        f"the configured directory {jobs}/125/sub/ cannot be resolved: Not a directory"
    )
    (jobs / "124" / "out").symlink_to(elsewhere / "secret")  # refused for what it is
    assert input_problem(jobs / "124" / "out", [f"{jobs}/125/sub/", f"{jobs}/124/"], 0) == (
        "a symbolic link leading out of the configured directories"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the links must be root's")
@settings(max_examples=60, deadline=None)
@given(
    links=st.lists(
        st.tuples(
            st.sampled_from(["a", "a/b", "c"]),
            st.sampled_from(["..", "../c", "b", "/ABS/a", "/ABS/c/..", ".", "x/.."]),
        ),
        max_size=4,
    ),
    path=st.sampled_from(["a", "a/b", "c", "a/l0", "c/l1/l2", "a/b/l3/..", "l0/l1", "a/../c"]),
)
def test_root_owned_links_resolve_as_the_kernel_does(links, path):
    """Through root's links (a site's own), the resolved directory is realpath's."""
    with tempfile.TemporaryDirectory() as directory:
        base = Path(os.path.realpath(directory))
        for sub in ("a/b", "c", "x"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        for number, (where, target) in enumerate(links):
            (base / where / f"l{number}").symlink_to(target.replace("/ABS", str(base)))
        root = str(base / path)
        try:
            expected = os.path.realpath(root, strict=True)
        except OSError:  # a loop or a dangling link: resolved_root need only not hang
            try:
                resolved_root(root)
            except OSError:
                pass
            return
        assert str(resolved_root(root)) == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@settings(max_examples=300)
@given(
    st.fixed_dictionaries(
        {"points": st.lists(JSON, max_size=3), "errors": JSON, "warnings": JSON, "outputs": JSON}
    )
    | JSON
)
def test_a_hostile_reply_is_refused_never_a_crash(reply) -> None:
    """Whatever a child sends, the parent gets a checked reply or a refusal."""
    message = json.dumps(reply).encode()
    try:
        decoded = _decode(message, [])
    except (ValueError, TypeError, KeyError, AttributeError):
        return
    for point in decoded.output.points:
        assert isinstance(point.measurement, str) and isinstance(point.fields, dict)
        point.to_line()


def credentials(paths, job) -> SourceOutput:
    """A source reporting who it runs as, from the kernel's own account of it."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    fields: dict[str, FieldValue] = {
        key: status[key].split()[0] if key != "Groups" else status[key].strip()
        for key in ("Uid", "Gid", "NoNewPrivs", "Groups")
    }
    fields["euid"] = str(os.geteuid())
    fields["Uid_all"] = status["Uid"].strip()
    return SourceOutput(points=[Point("who", {"jobid": job.job_id}, fields, 1)])


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_the_child_has_dropped_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's file is refused; the user's is read by a process that is that user for good."""
    module = types.ModuleType(MODULE)
    monkeypatch.setattr(module, "collect", credentials, raising=False)
    monkeypatch.setitem(sys.modules, MODULE, module)
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "geopm_report", (MODULE, "collect"))
    policy = ReadPolicy(256, 5.0, uid=65534, gid=65534, user="nobody")
    with tempfile.TemporaryDirectory() as directory:
        base = Path(directory)
        base.chmod(0o755)
        roots = (str(base),)
        (base / "root").write_text("x")
        (base / "root").chmod(0o600)
        (base / "user").write_text("x")
        os.chown(base / "user", 65534, 65534)
        paths = [base / "root", base / "user"]
        request = SourceRequest("geopm_report", (paths,), roots=roots)
        output = collect_isolated([request], JOB, policy)
    assert output.errors == [
        f"geopm_report: {base / 'root'}: refused: not readable by the job's user (uid 65534)"
    ]
    [who] = output.points
    uid_all, groups = who.fields["Uid_all"], who.fields["Groups"]
    assert isinstance(uid_all, str) and isinstance(groups, str)
    assert uid_all.split() == ["65534"] * 4  # real, effective, saved, fs
    assert who.fields["Gid"] == "65534" and who.fields["NoNewPrivs"] == "1"
    assert groups.split() == ["65534"]  # nobody's groups, none of root's


def probe(paths, job) -> SourceOutput:
    """A source that reports what it inherited: its open descriptors and the environment."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
    listing = [fd for fd, target in fds.items() if target.startswith("/proc/")]
    for fd in listing:
        del fds[fd]
    return SourceOutput(warnings=[json.dumps({"fds": fds, "env": sorted(os.environ)})])


def test_the_child_inherits_no_descriptor_and_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType(MODULE)
    monkeypatch.setattr(module, "collect", probe, raising=False)
    monkeypatch.setitem(sys.modules, MODULE, module)
    monkeypatch.setitem(sources.SOURCE_ENTRIES, "geopm_report", (MODULE, "collect"))
    for name in ("INFLUX_TOKEN", "INFLUX_PASSWORD", "INFLUX_USERNAME_FILE", "VAULT_TOKEN"):
        monkeypatch.setenv(name, "SECRET-value")
    monkeypatch.setenv("HPCMON_HARMLESS", "kept")
    secret = tmp_path / "token"
    secret.write_text("SECRET")
    warnings: list[str] = []
    monkeypatch.setattr(
        "hpcmon.post_job.sources.log.warning", lambda fmt, *args: warnings.append(args[-1])
    )
    with secret.open() as root_file, open(os.devnull, "wb") as other:  # open in the hook
        held = {root_file.fileno(), other.fileno()}
        [path] = inputs(tmp_path, a="x")
        output = collect_isolated([SourceRequest("geopm_report", ([path],))], JOB, ReadPolicy(256))
    assert output.errors == []
    [report] = [json.loads(w) for w in warnings]
    fds = {int(fd): target for fd, target in report["fds"].items()}
    assert fds[0] == os.devnull
    assert not held & set(fds)
    [pipe] = set(fds) - {0, 1, 2}  # the reply pipe only
    assert fds[pipe].startswith("pipe:")
    assert not [name for name in report["env"] if name.startswith("INFLUX") or "TOKEN" in name]
    assert "HPCMON_HARMLESS" in report["env"]


def test_a_reader_child_of_the_parent_does_not_break_the_reading_child() -> None:
    """A process that already read a log in-process (PyDarshan's reader child started) then
    reads in the bounded child: the same points, not an OSError from descriptors that the
    bounded child closed and reused. In a fresh interpreter, whose few descriptors are the
    ones reused (pytest holds many more)."""
    log = Path(__file__).resolve().parents[1] / "data/darshan/logs/mpi-io-test-x86_64-3.4.6.darshan"
    code = f"""
import json
from pathlib import Path
from hpcmon.post_job.model import JobContext
from hpcmon.post_job.reading import ReadPolicy, collect_isolated
from hpcmon.post_job.sources import SourceRequest, collect
requests = [SourceRequest("darshan", ([Path({str(log)!r})], []))]
job = JobContext("1", "c")
in_process = collect(requests, job)
isolated = collect_isolated(requests, job, ReadPolicy(memory_limit_mib=2048, cpu_seconds=60))
print(json.dumps([[p.to_line() for p in o.points] + o.errors for o in (in_process, isolated)]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    in_process, isolated = json.loads(run.stdout)
    assert in_process and isolated == in_process
