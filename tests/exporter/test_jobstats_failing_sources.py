"""Issue 13, parts 1 and 2: a failing, hung, runaway or garbled source never looks complete.

lctl is replaced by shell stand-ins that replay real recorded output (tests/data/jobstats) and
then fail the way real lctl runs were seen to fail: non-zero exit after half the output,
garbage, a grandchild holding the pipe, endless output, a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcmon.exporter.cli import Exporter
from tests.exporter.test_jobstats_collector import (
    DATA,
    HP_MDT,
    HP_OST,
    fake_lctl,
    make_collector,
    named,
    replay,
    samples_of,
    value,
)
from tests.servers import free_port, http_get, run_exporter

DDN_LCTL = DATA / "whamcloud_lustre-collector__src_fixtures_valid_ex8761-lctl.txt"


def oss_capture(tmp_path: Path) -> Path:
    """A real OST's output as lctl prints it, 35 jobs."""
    path = tmp_path / "oss.txt"
    path.write_text("obdfilter.lustrefs-OST0000.job_stats=\n" + HP_OST.read_text())
    return path


def failures(found, reason: str, source: str = "lctl") -> float | None:
    return value(found, "lustre_jobstats_source_failures_total", source=source, reason=reason)


def test_non_zero_exit_after_half_the_output_marks_the_targets_down(tmp_path: Path) -> None:
    capture = oss_capture(tmp_path)
    lctl = fake_lctl(tmp_path, replay(capture))
    collector = make_collector("--jobstats.lctl-path", str(lctl))
    found = samples_of(collector.sample())
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    assert failures(found, "exit") == 0

    # Half the output (up to a line in the middle of a record), then an error exit.
    text = capture.read_text()
    half = tmp_path / "half.txt"
    half.write_text(text[: text.index("\n", len(text) // 2) + 1])
    lctl.write_text(
        lctl.read_text().replace(replay(capture), replay(half) + "\necho 'I/O error' >&2; exit 5")
    )
    found = samples_of(collector.sample())
    up = named(found, "lustre_jobstats_up")
    assert up == {
        frozenset({"component": "ost", "target": "lustrefs-OST0000", "source": "lctl"}.items()): 0
    }
    assert failures(found, "exit") == 1
    assert not named(found, "lustre_job_write_bytes_total")  # no partial data at all


def test_garbage_output_gives_no_target_named_after_lctl(tmp_path: Path) -> None:
    lctl = fake_lctl(tmp_path, "printf 'Segmentation fault\\n\\001\\002 garbage\\n'")
    found = samples_of(make_collector("--jobstats.lctl-path", str(lctl)).sample())
    targets = {dict(labels)["target"] for labels in named(found, "lustre_jobstats_up")}
    assert targets == {""}
    assert value(found, "lustre_jobstats_up", component="", target="", source="lctl") == 0
    assert not named(found, "lustre_jobstats_jobs")


def test_crlf_output_reads_like_lf(tmp_path: Path) -> None:
    capture = tmp_path / "crlf.txt"
    capture.write_bytes(oss_capture(tmp_path).read_bytes().replace(b"\n", b"\r\n"))
    for source in (
        ["--jobstats.lctl-path", str(fake_lctl(tmp_path, replay(capture)))],
        ["--jobstats.source", "file", "--jobstats.path", str(capture)],
    ):
        found = samples_of(make_collector(*source).sample())
        assert (
            value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
        )
        errors = named(found, "lustre_jobstats_parse_errors_total")
        assert set(errors.values()) == {0}


def test_a_target_listed_twice_keeps_the_jobs_of_both_sections(tmp_path: Path) -> None:
    records = HP_OST.read_text().split("\n- job_id:")
    first = "\n- job_id:".join(records[:20]) + "\n"
    second = "job_stats:\n- job_id:" + "\n- job_id:".join(records[20:])
    path = tmp_path / "twice.txt"
    path.write_text(
        f"obdfilter.lustrefs-OST0000.job_stats=\n{first}"
        f"mdt.lustrefs-MDT0000.job_stats=\n{HP_MDT.read_text()}"
        f"obdfilter.lustrefs-OST0000.job_stats=\n{second}"
    )
    found = samples_of(
        make_collector("--jobstats.source", "file", "--jobstats.path", str(path)).sample()
    )
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    jobs = {
        dict(labels)["jobid"]
        for labels in named(found, "lustre_job_write_bytes_total")
        if dict(labels)["target"] == "lustrefs-OST0000"
    }
    assert len(jobs) == 35


def test_unreadable_min_max_sum_are_parse_errors_never_zero(tmp_path: Path) -> None:
    good = "  write_bytes:     { samples: 2, unit: bytes, min: 4096, max: 8192, sum: 12288 }\n"
    path = tmp_path / "bad.txt"
    lines = ["obdfilter.fs-OST0000.job_stats=", "job_stats:"]
    for jobid, op in (
        ("good", good),
        ("badmin", good.replace("min: 4096", "min: 4x96")),
        ("badmax", good.replace("max: 8192", "max: -1")),
        ("badsum", good.replace("sum: 12288", "sum: 1.5e4")),
        ("nomin", good.replace("min: 4096, ", "")),
    ):
        lines += [f"- job_id: {jobid}", "  snapshot_time: 100", op.rstrip("\n")]
    path.write_text("\n".join(lines) + "\n")
    found = samples_of(
        make_collector("--jobstats.source", "file", "--jobstats.path", str(path)).sample()
    )
    written = {
        dict(labels)["jobid"]: v
        for labels, v in named(found, "lustre_job_write_bytes_total").items()
    }
    assert written == {"good": 12288}
    assert (
        value(found, "lustre_jobstats_parse_errors_total", component="ost", target="fs-OST0000")
        == 4
    )


def test_output_cap_stops_a_runaway_lctl_and_marks_it_down(tmp_path: Path) -> None:
    capture = oss_capture(tmp_path)
    lctl = fake_lctl(tmp_path, replay(capture) + '\n[ "$2" = obdfilter.*.job_stats ] && yes junk')
    collector = make_collector(
        "--jobstats.lctl-path", str(lctl), "--jobstats.max-output-bytes", "1M"
    )
    started = time.monotonic()
    found = samples_of(collector.sample())
    assert time.monotonic() - started < 5
    assert failures(found, "output_limit") == 1
    assert value(found, "lustre_jobstats_up", component="", target="", source="lctl") == 0
    assert not named(found, "lustre_job_write_bytes_total")


def test_output_cap_applies_to_files(tmp_path: Path) -> None:
    path = oss_capture(tmp_path)
    found = samples_of(
        make_collector(
            "--jobstats.source", "file", "--jobstats.path", str(path),
            "--jobstats.max-output-bytes", "1K",
        ).sample()
    )  # fmt: skip
    assert failures(found, "output_limit", source=str(path)) == 1
    assert value(found, "lustre_jobstats_up", component="", target="", source=str(path)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow  # waits out timeouts: not in `make check`
def test_a_grandchild_holding_the_pipe_is_killed_with_lctl(tmp_path: Path) -> None:
    capture = oss_capture(tmp_path)
    pidfile = tmp_path / "grandchild.pid"
    # lctl prints its output and exits 0, leaving a grandchild that holds stdout open.
    lctl = fake_lctl(tmp_path, f"sleep 300 & echo $! > {pidfile}\n" + replay(capture))
    collector = make_collector("--jobstats.lctl-path", str(lctl), "--jobstats.timeout", "20")
    started = time.monotonic()
    found = samples_of(collector.sample())
    assert time.monotonic() - started < 5  # not the 20 s timeout, not the grandchild's 300 s
    assert value(found, "lustre_jobstats_jobs", component="ost", target="lustrefs-OST0000") == 35
    assert failures(found, "timeout") == 0
    time.sleep(0.2)
    assert not _alive(int(pidfile.read_text()))


def test_hung_lctl_with_interval_0_answers_within_the_scrape_timeout(tmp_path: Path) -> None:
    capture = oss_capture(tmp_path)
    lctl = fake_lctl(tmp_path, replay(capture))
    collector = make_collector("--jobstats.lctl-path", str(lctl), "--jobstats.timeout", "60")
    collector.sample()  # the target is known
    pidfile = tmp_path / "sleep.pid"
    hang = f"sleep 300 & echo $! > {pidfile}; wait"  # lctl and a child of it, both hung
    lctl.write_text(lctl.read_text().replace(replay(capture), hang))
    started = time.monotonic()
    found = samples_of(b"".join(collector.exposition_before(2.0).chunks()))
    assert time.monotonic() - started < 2.0
    time.sleep(0.2)
    assert not _alive(int(pidfile.read_text()))  # the whole process group was killed
    assert (
        value(
            found, "lustre_jobstats_up", component="ost", target="lustrefs-OST0000", source="lctl"
        )
        == 0
    )
    assert failures(found, "timeout") == 1


def test_exporter_sigterm_kills_a_running_lctl(tmp_path: Path) -> None:
    pidfile = tmp_path / "lctl.pid"
    lctl = fake_lctl(tmp_path, f"echo $$ > {pidfile}\nsleep 300 & wait")
    args = [f"--jobstats.lctl-path={lctl}", "--jobstats.timeout=120", "--jobstats.interval=1"]
    with run_exporter(args, tmp_path) as exporter:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        lctl_pid = int(pidfile.read_text())
        group = os.getpgid(lctl_pid)
        assert group == lctl_pid != os.getpgid(exporter.proc.pid)  # its own process group
        members = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _group_of(int(p.name)) == group
        ]
        assert len(members) >= 2  # lctl and its sleeping child
        exporter.proc.send_signal(signal.SIGTERM)
        assert exporter.proc.wait(timeout=15) == 0
    time.sleep(0.2)
    assert not any(_alive(pid) for pid in members)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--web.listen-address", "127.0.0.1:99999"], "port 0-65535"),
        (["--web.config.file", "/nonexistent/web.yml"], "cannot read"),
        (["--web.config.file", "NONUTF8"], "not UTF-8"),
        (["--web.config.file", "TLS99"], "min_version 'TLS99' is not one of"),
        (["--jobstats.max-output-bytes", "0"], "size in bytes"),
        (["--jobstats.rates", "bytes"], "expected all, none"),
    ],
)
def test_bad_flags_and_files_give_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    bad = tmp_path / "web.yml"
    bad.write_bytes(b"basic_auth_users:\n  \xff\xfe: x\n")
    tls99 = tmp_path / "tls99.yml"
    tls99.write_text(
        "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n  min_version: TLS99\n"
    )
    args = [{"NONUTF8": str(bad), "TLS99": str(tls99)}.get(arg, arg) for arg in args]
    if "--web.listen-address" not in args:
        args = ["--web.listen-address", f"127.0.0.1:{free_port()}", *args]
    result = subprocess.run(
        [sys.executable, "-m", "hpcmon.exporter", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    if lines and lines[0].startswith("usage:"):  # argparse's usage line, one line
        lines = lines[1:]
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.slow  # waits out timeouts: not in `make check`
def test_metrics_answer_is_not_held_by_a_hung_lctl(tmp_path: Path) -> None:
    """End to end with interval 0: the scrape says its timeout, the exporter answers in it."""
    lctl = fake_lctl(tmp_path, "sleep 300")
    args = [f"--jobstats.lctl-path={lctl}", "--jobstats.interval=0", "--jobstats.timeout=60"]
    with run_exporter(args, tmp_path) as exporter:
        started = time.monotonic()
        status, body = http_get(f"http://{exporter.address}/metrics", timeout=30)
        assert status == 200 and time.monotonic() - started < 10
        found = samples_of(body)
        assert value(found, "lustre_jobstats_up", component="", target="", source="lctl") == 0


def test_a_dead_sampler_process_is_a_failure_then_restarts(tmp_path: Path) -> None:
    collector = make_collector(
        "--jobstats.source", "file", "--jobstats.path", str(HP_OST), "--jobstats.interval", "0.2"
    )
    exporter = Exporter([collector])
    collector.start()
    try:
        first = collector.exposition_before(10)
        assert b"lustre_jobstats_jobs" in b"".join(first.chunks())
        assert collector._worker is not None  # started: interval > 0
        old_pid = collector._worker.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # no stale data while it is down
            body = b"".join(
                part if isinstance(part, bytes) else b"".join(part.chunks())
                for part in exporter.render(0.5)
            )
            if b'hpcmon_exporter_collector_success{collector="jobstats"} 0.0' in body:
                assert b"lustre_jobstats_jobs" not in body
                break
        else:
            raise AssertionError("the dead sampler was not reported")
        again = collector.exposition_before(10)  # started again
        assert collector._worker.pid != old_pid
        assert b"lustre_jobstats_jobs" in b"".join(again.chunks())
    finally:
        collector.stop()


def test_the_sampler_process_dies_with_a_killed_exporter(tmp_path: Path) -> None:
    args = ["--jobstats.source=file", f"--jobstats.path={HP_OST}", "--jobstats.interval=1"]
    with run_exporter(args, tmp_path) as exporter:
        status, _ = http_get(f"http://{exporter.address}/metrics", timeout=30)
        assert status == 200
        pid = exporter.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        sampler = [int(child) for child in children if b"worker" in _cmdline(int(child))]
        assert len(sampler) == 1
        assert os.getpriority(os.PRIO_PROCESS, sampler[0]) > os.getpriority(os.PRIO_PROCESS, pid)
        exporter.proc.kill()  # no chance to clean up
        exporter.proc.wait(10)
    deadline = time.monotonic() + 10
    while _alive(sampler[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(sampler[0])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.slow  # waits out timeouts: not in `make check`
def test_a_sampler_that_cannot_start_says_so_once_and_scrapes_do_not_wait(
    tmp_path: Path, monkeypatch, caplog, capfd
) -> None:
    """Issue 21: a child that cannot find its module (here a shadowing hpcmon/ put first on
    its path) is one line, not one per restart; scrapes answer at once, failing."""
    shadow = tmp_path / "shadow"
    package = shadow / "hpcmon" / "exporter" / "jobstats"
    package.mkdir(parents=True)
    for folder in (package, *package.parents[:2]):
        (folder / "__init__.py").write_text("")
    collector = make_collector(
        "--jobstats.source", "file", "--jobstats.path", str(HP_OST), "--jobstats.interval", "0.2"
    )
    exporter = Exporter([collector])
    monkeypatch.setenv("PYTHONPATH", str(shadow))  # the child's environment only
    collector.start()
    try:
        time.sleep(8)  # restarts at 0, ~2 and ~6 s
        started = time.monotonic()
        body = b"".join(
            part if isinstance(part, bytes) else b"".join(part.chunks())
            for part in exporter.render(5)
        )
        assert time.monotonic() - started < 2  # does not wait for a child that cannot start
        assert b'hpcmon_exporter_collector_success{collector="jobstats"} 0.0' in body
    finally:
        collector.stop()
    assert "No module named" not in capfd.readouterr().err  # the child's own line is held
    said = [r.getMessage() for r in caplog.records if r.name == "hpcmon.exporter.jobstats"]
    assert len(said) == 1, said
    assert "cannot start (code 1): " in said[0]
    assert said[0].endswith("No module named hpcmon.exporter.jobstats.worker; retrying, "
                            "backing off up to 60 s"), said  # fmt: skip
