"""``hpcmon-post-job migrate`` on a real InfluxDB 1.6.7: a database written by the release
before issue 31 (tests/data/influx-layout-1, see its SOURCES.md) ends up holding exactly what
the current hook writes for the same inputs, also when the migration is killed half-way and
run again; usage errors and an unreachable server give one line and their exit status."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hpcmon.post_job.layout import INDEX, PER_JOB_TAGS, index_bucket
from hpcmon.post_job.migrate import MEASUREMENTS
from tests import servers

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
OLD = DATA / "influx-layout-1"
COMMAND = Path(sys.executable).parent / "hpcmon-post-job"  # the installed command
LOGS = DATA / "darshan" / "logs"
# The inputs each job of influx-layout-1 was made from (SOURCES.md), for the current hook.
JOBS = {
    "100": ["--cluster", "demo", "--user", "alice", "--app", "ior",
            "--darshan", str(LOGS / "mpi-io-test-x86_64-3.5.0.darshan")],
    "101": ["--cluster", "demo", "--user", "alice", "--app", "ior",
            "--darshan", str(LOGS / "mpi-io-test-x86_64-3.5.0.darshan")],
    "4242": ["--cluster", "demo",
             "--darshan", str(LOGS / "mpi-io-test-x86_64-3.5.0.darshan"),
             str(LOGS / "e3sm_io_heatmap_only.darshan"),
             "--recorder", str(DATA / "recorder" / "v3.0.0" / "tiny_mpi_np2_ipc"),
             "--viztracer", "{viztracer}",
             "--geopm-report",
             str(DATA / "geopm_report" / "geopm-1.1.0+dev429_nekbone_frequency_map_4hosts.report")],
}  # fmt: skip


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(COMMAND), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=servers.loopback_env(),
    )


def migrate(url: str, db: str, *more: str) -> subprocess.CompletedProcess:
    return run("migrate", "--influx.v1-url", url, "--influx.database", db, *more)


def new_database(server: servers.InfluxDB1) -> str:
    name = "m" + uuid.uuid4().hex[:10]
    server.create_database(name)
    return name


def write_old_layout(server: servers.InfluxDB1) -> str:
    db = new_database(server)
    for path in sorted(OLD.glob("*.lp")):
        url = f"{server.url}/write?" + urllib.parse.urlencode({"db": db, "precision": "ns"})
        request = urllib.request.Request(url, data=path.read_bytes(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
    return db


def dump(server: servers.InfluxDB1, db: str) -> set[tuple]:
    """Every stored point: (measurement, tags, fields, time); fields with their stored type."""
    found: set[tuple] = set()
    types = field_types(server, db)
    for series in server.series("SELECT * FROM /.*/ GROUP BY *", db):
        name = series["name"]
        tags = tuple(sorted((k, v) for k, v in series.get("tags", {}).items() if v != ""))
        columns = series["columns"]
        for row in series["values"]:
            fields = tuple(
                sorted(
                    (column, types[name, column], value)
                    for column, value in zip(columns[1:], row[1:], strict=True)
                    if value is not None
                )
            )
            found.add((name, tags, fields, row[0]))
    return found


def field_types(server: servers.InfluxDB1, db: str) -> dict[tuple[str, str], str]:
    types: dict[tuple[str, str], str] = {}
    for series in server.series("SHOW FIELD KEYS", db):
        for key, kind in series["values"]:
            assert (series["name"], key) not in types, f"{series['name']}.{key}: two types"
            types[series["name"], key] = kind
    return types


def series_keys(server: servers.InfluxDB1, db: str) -> list[str]:
    return [row[0] for s in server.series("SHOW SERIES", db) for row in s["values"]]


def viztracer_trace(directory: Path) -> Path:
    """The VizTracer trace, dated as when influx-layout-1 was made: it has no
    baseTimeNanoseconds, so its points take the file's modification time (files.py)."""
    line = next(
        line
        for line in (OLD / "job-4242.lp").read_text().splitlines()
        if line.startswith("viztracer_summary,")
    )
    trace = directory / "threaded.json"
    shutil.copyfile(DATA / "viztracer" / "threaded.json", trace)
    stamp = int(line.rsplit(" ", 1)[1])
    os.utime(trace, ns=(stamp, stamp))
    return trace


def hook_inputs(job: str, directory: Path) -> list[str]:
    return [arg.format(viztracer=viztracer_trace(directory)) for arg in JOBS[job]]


@pytest.fixture(scope="module")
def reference(influxdb1: servers.InfluxDB1, tmp_path_factory: pytest.TempPathFactory) -> set[tuple]:
    """What the current hook stores for the same inputs, in a database of its own."""
    db = new_database(influxdb1)
    directory = tmp_path_factory.mktemp("viztracer")
    for job in JOBS:
        done = run("--job-id", job, *hook_inputs(job, directory), "--influx.v1-url",
                   influxdb1.url, "--influx.database", db)  # fmt: skip
        assert done.returncode == 0, done.stderr
    points = dump(influxdb1, db)
    assert len([p for p in points if p[0] == INDEX]) == len(JOBS)
    return points


def assert_migrated(server: servers.InfluxDB1, db: str, reference: set[tuple]) -> None:
    keys = series_keys(server, db)
    data_keys = [k for k in keys if not k.startswith(INDEX + ",")]
    assert data_keys and not [k for k in keys if re.search(r",jobid=", k)]
    for measurement in MEASUREMENTS:
        # plain SHOW TAG KEYS still names the tag keys of dropped series on 1.6.7's TSI index
        keys_left = server.series(
            f'SHOW TAG KEYS FROM "{measurement}" WHERE "jobid"::tag =~ /./', db
        )
        assert keys_left == [], measurement
    index = sorted(k for k in keys if k.startswith(INDEX + ","))
    assert index == sorted({f"{INDEX},bucket={index_bucket(job)},cluster=demo" for job in JOBS})
    stored = dump(server, db)
    assert stored == reference
    for job in JOBS:  # every job complete, the two same-second jobs included
        mine = {p for p in stored if ("jobid", "string", job) in p[2]}
        assert mine == {p for p in reference if ("jobid", "string", job) in p[2]}
        assert mine
    for name, tags, _, _ in stored:
        assert not {k for k, _ in tags} & set(PER_JOB_TAGS), name


def test_migrates_the_old_layout_to_what_the_hook_now_writes(
    influxdb1: servers.InfluxDB1, reference: set[tuple]
) -> None:
    db = write_old_layout(influxdb1)
    done = migrate(influxdb1.url, db, "--progress-every", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    assert re.search(r"migrate: 2/3 jobs \(0 failed\)", lines[0])
    assert re.search(r"migrate: jobs=3 migrated=3 failed=0 left=0 points_read=578 ", lines[-1])
    assert len(lines) == 2
    assert_migrated(influxdb1, db, reference)
    again = migrate(influxdb1.url, db)  # already in the new layout
    assert again.returncode == 0
    assert again.stderr.count("\n") == 1 and "nothing to do" in again.stderr
    assert dump(influxdb1, db) == reference


def test_a_database_written_by_the_current_hook_is_left_as_it_is(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    db = new_database(influxdb1)
    for job in JOBS:
        assert run("--job-id", job, *hook_inputs(job, tmp_path), "--influx.v1-url",
                   influxdb1.url, "--influx.database", db).returncode == 0  # fmt: skip
    before = dump(influxdb1, db)
    done = migrate(influxdb1.url, db)
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1 and "nothing to do" in done.stderr
    assert dump(influxdb1, db) == before


def test_only_the_named_cluster_is_migrated(
    influxdb1: servers.InfluxDB1, reference: set[tuple]
) -> None:
    db = write_old_layout(influxdb1)
    done = migrate(influxdb1.url, db, "--cluster", "elsewhere")
    assert done.returncode == 0 and "nothing to do" in done.stderr
    assert len([k for k in series_keys(influxdb1, db) if ",jobid=" in k]) > 100
    done = migrate(influxdb1.url, db, "--cluster", "demo")
    assert done.returncode == 0, done.stderr
    assert_migrated(influxdb1, db, reference)


class KillingProxy:
    """Forwards to InfluxDB; SIGKILLs the migration at the ``count``-th request of ``kind``
    (``write`` or ``drop``), ``before`` forwarding it or once InfluxDB has answered it."""

    def __init__(
        self, target: str, kind: str | None, count: int, before: bool, delay: float = 0.0
    ) -> None:
        proxy = self
        self.victim: subprocess.Popen | None = None
        self.seen = {"write": 0, "drop": 0, "query": 0}
        self.killed = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                query = urllib.parse.parse_qs(body.decode()).get("q", [""])[0]
                if self.path.startswith("/write"):
                    what = "write"
                else:
                    what = "drop" if query.upper().startswith("DROP") else "query"
                proxy.seen[what] += 1
                time.sleep(delay)
                trigger = what == kind and proxy.seen[what] == count
                if trigger and before:
                    proxy.kill()
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    target + self.path, data=body, method="POST", headers=headers
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, answer = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, answer = exc.code, exc.read()
                if trigger:
                    proxy.kill()
                    return
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kill(self) -> None:
        assert self.victim is not None
        self.victim.send_signal(signal.SIGKILL)
        self.killed.set()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def killing_proxy(influxdb1: servers.InfluxDB1) -> Iterator:
    made: list[KillingProxy] = []

    def make(kind: str | None, count: int, before: bool, delay: float = 0.0) -> KillingProxy:
        made.append(KillingProxy(influxdb1.url, kind, count, before, delay))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


@pytest.mark.parametrize(
    ("kind", "count", "before", "per_drop"),
    [
        ("write", 4, True, "50"),  # job 4242 half written (batches of 100: 17 + 17 + 547
        # lines), none dropped yet
        ("write", 5, False, "1"),  # the same, once InfluxDB took one more batch; 100, 101 done
        ("drop", 1, True, "1"),  # job 100 written, its old series still there
        ("drop", 2, False, "1"),  # jobs 100 and 101 migrated, the answer to the drop never read
        ("drop", 1, False, "2"),  # jobs 100 and 101 dropped at once
    ],
)
def test_killed_migration_loses_nothing_and_a_rerun_finishes_it(
    influxdb1: servers.InfluxDB1,
    reference: set[tuple],
    killing_proxy,
    kind: str,
    count: int,
    before: bool,
    per_drop: str,
) -> None:
    db = write_old_layout(influxdb1)
    old_points = {job: len((OLD / f"job-{job}.lp").read_text().splitlines()) for job in JOBS}
    proxy = killing_proxy(kind, count, before)
    argv = [str(COMMAND), "migrate", "--influx.v1-url", proxy.url, "--influx.database", db,
            "--influx.batch-size", "100", "--jobs-per-drop", per_drop]  # fmt: skip
    proxy.victim = subprocess.Popen(
        argv, cwd=REPO, stderr=subprocess.PIPE, text=True, env=servers.loopback_env()
    )
    _, stderr = proxy.victim.communicate(timeout=120)
    assert proxy.killed.is_set() and proxy.victim.returncode == -signal.SIGKILL, stderr
    # at the kill, each job has all its old points, or its old series are gone and all its
    # new points are in
    half = dump(influxdb1, db)
    for job in JOBS:
        old = [p for p in half if p[0] != INDEX and ("jobid", job) in p[1]]
        if old:
            assert len(old) == old_points[job], job
        else:
            index_tags = {("jobid", job), ("cluster", "demo")}
            new = {p for p in reference if ("jobid", "string", job) in p[2] or
                   p[0] == INDEX and set(p[1]) == index_tags}  # fmt: skip
            assert new <= half, job
    assert any(("jobid", "4242") in p[1] for p in half)  # the kill came before the end
    done = migrate(influxdb1.url, db)
    assert done.returncode == 0, done.stderr
    assert_migrated(influxdb1, db, reference)


def test_a_job_whose_lines_are_rejected_is_named_and_kept(
    influxdb1: servers.InfluxDB1, reference: set[tuple]
) -> None:
    db = write_old_layout(influxdb1)
    trace = next(
        line
        for line in (OLD / "job-4242.lp").read_text().splitlines()
        if line.startswith("recorder_trace,")
    )
    # a field "trace" of another type in the shard of job 4242's recorder_trace point
    conflict = f"recorder_trace,app=other trace=1i {trace.rsplit(' ', 1)[1]}\n"
    url = f"{influxdb1.url}/write?" + urllib.parse.urlencode({"db": db, "precision": "ns"})
    urllib.request.urlopen(urllib.request.Request(url, data=conflict.encode()), timeout=30)
    done = migrate(influxdb1.url, db)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr
    assert "ERROR migrate: job 4242 not migrated: 1 line(s) rejected, first: HTTP 400" in lines[0]
    assert "field type conflict" in lines[0]
    assert "jobs=3 migrated=2 failed=1 left=0" in lines[1]
    old = [k for k in series_keys(influxdb1, db) if ",jobid=" in k and not k.startswith(INDEX)]
    assert len(old) == len({k for k in old if ",jobid=4242" in k}) > 50
    stored = dump(influxdb1, db)
    for job in ("100", "101"):
        mine = {p for p in reference if ("jobid", "string", job) in p[2]}
        assert mine <= stored
    assert len([p for p in stored if ("jobid", "4242") in p[1] and p[0] != INDEX]) == 546


def test_a_time_limit_stops_the_run_in_one_line_and_a_rerun_finishes(
    influxdb1: servers.InfluxDB1, reference: set[tuple], killing_proxy
) -> None:
    db = write_old_layout(influxdb1)
    # a job takes 4 or 5 requests: 1 s each cannot finish three jobs in 3 s on any machine
    slow = killing_proxy(None, 0, False, delay=1.0)
    done = migrate(slow.url, db, "--time-limit", "3")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert "time limit" in done.stderr and "rerun" in done.stderr, done.stderr
    assert re.search(r"migrate: jobs=3 migrated=[012] ", last) or "exiting with status 1" in last
    assert any(",jobid=" in k for k in series_keys(influxdb1, db))
    done = migrate(influxdb1.url, db)
    assert done.returncode == 0, done.stderr
    assert_migrated(influxdb1, db, reference)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "migrate needs --influx.v1-url URL and --influx.database DB"),
        (["--influx.v1-url", "http://127.0.0.1:1"], "go together"),
        (["--influx.database", "x"], "migrate needs --influx.v1-url"),
        (
            ["--influx.url", "http://h", "--influx.org", "o", "--influx.bucket", "b"],
            "InfluxDB 1.x",
        ),  # fmt: skip
        (["--influx.v1-url", "ftp://h", "--influx.database", "x"], "not an http://"),
        (
            ["--influx.v1-url", "http://h", "--influx.database", "x", "--bogus", "1"],
            "unrecognized arguments: --bogus",
        ),  # fmt: skip
        (
            ["--influx.v1-url", "http://h", "--influx.database", "x", "--influx.batch-size", "0"],
            "--influx.batch-size",
        ),  # fmt: skip
        (["--influx.token", "secret"], "there is no --influx.token"),
    ],
)
def test_usage_errors_are_one_line_and_status_2(args: list[str], said: str) -> None:
    done = run("migrate", *args, timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "secret" not in done.stderr


def test_an_unreachable_server_is_one_line_and_status_1() -> None:
    done = migrate(f"http://127.0.0.1:{servers.free_port()}", "hpcmon")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "cannot list the jobs to migrate: cannot reach" in done.stderr


def test_a_missing_database_or_retention_policy_is_one_line(
    influxdb1: servers.InfluxDB1,
) -> None:
    done = migrate(influxdb1.url, "no_such_db")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "database not found" in done.stderr, done.stderr
    done = migrate(influxdb1.url, new_database(influxdb1), "--influx.retention-policy", "nope")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "'nope' not found" in done.stderr, done.stderr


def test_every_measurement_of_the_hook_is_migrated() -> None:
    """MEASUREMENTS names every measurement a Point is made with in post_job/."""
    sources = {p: p.read_text() for p in (REPO / "post_job").rglob("*.py")}
    constants = {
        name: value
        for text in sources.values()
        for name, value in re.findall(r'^([A-Z_]+) = "([a-z_0-9]+)"', text, re.M)
    }
    made: set[str] = set()
    for text in sources.values():
        made.update(re.findall(r'Point\(\s*"([a-z_0-9]+)"', text))
        made.update(constants[name] for name in re.findall(r"Point\(\s*([A-Z_]+)\b", text))
    assert made - {INDEX} == set(MEASUREMENTS)
