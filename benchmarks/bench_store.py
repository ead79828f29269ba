"""Benchmark of the InfluxDB layout of the post-job points (issue 31): today's layout against
the new one (post_job/layout.py), in the same run, on the same jobs.

Jobs: ``--jobs`` (default 100,000) at 5,000 a day (20 days), 300 users with 3 applications
each (an application always runs the same executable), one Slurm cluster. Each job is the
hook's own points for one of the small bundled Darshan logs (``LOGS``, in rotation by
application: 11 to 21 points a log), re-tagged per job (``jobid``, ``user``, ``app``; the
``job_id`` field of app_run) and shifted in time to the job's start (whole seconds: the
points' times and the ``start_time``/``end_time`` fields), plus the ``slurm_job`` point the
epilog writes for every job (hpcmon.post_job.slurm_points; 1 job in 20 failed).

- today's layout: what the release at the base commit writes. The bench makes a ``git
  worktree`` of it (``--base REV``, default the merge-base of HEAD with origin's branch, else
  with ``main``) and runs ITS hook (``python -m hpcmon.post_job --darshan LOG``, line protocol
  on standard output) with a PYTHONPATH holding an ``hpcmon`` package of symlinks into the
  worktree, laid out as pyproject.toml's package-dir maps it; no virtualenv of its own.
- the new layout: the same points through this tree's ``migrate.migrated_points`` with the
  job's context, i.e. what a migration of the old layout does. Checked once per log against
  this tree's own hook on the same log (the lines must be the same set).

Two InfluxDB 1.6.7 servers (devtools/servers.py, TSI: index-version tsi1, no series limit),
one per layout, written one after the other by one client each (HTTP ``/write``, 10,000
lines a request, precision ns): the write rate is lines over the time spent in those
requests (generating the lines is not timed). Both servers get two [data] settings that
compress time the way the 20 days of jobs are compressed into minutes: a cache snapshot
after 10 s without writes (default 10 min) and a full compaction of a shard 30 s after its
last write (default 4 h); and a write timeout of 10 min (default 10 s: a loaded 2-core
machine takes longer for 10,000 lines of new series). At each checkpoint (``--at``, default
25,000, 50,000 and 100,000 jobs) both servers settle (cache written, no compaction queued
or running), restart, and a report and the job list warm them up; then:

- series: ``SHOW SERIES EXACT CARDINALITY`` summed over the measurements, and per job;
- data directory: the blocks of its data and wal directories (``du``) after the restart;
- memory: influxd's RssAnon (anonymous resident memory, /proc/PID/status);
- times, each the median of ``--repeats`` runs, the two layouts interleaved run by run, each
  by its own version's code in a worker process of its own (the same PYTHONPATH trick for
  the base, this tree for the new layout), timed inside the worker:
  - the report of a job of the first, the middle and the last day so far: that version's
    ``hpcmon.report.cli.main`` as ``hpcmon-report --job-id ID --cluster C --influx.v1-url
    URL --influx.database hpcmon`` runs it (text to a buffer, history included);
  - the job list over the last 1, 7 and 30 days: the jobs dashboard of that version
    (``hpcmon.dashboards.generate.dashboards``), its "Finished jobs by I/O score" table
    (job_diagnosis) and its "Finished jobs" table (slurm_job), ``$timeFilter`` put in by
    that version's ``dashboards.lint.substitute_variables``, sent to ``/query`` (epoch ms)
    as Grafana does;
  - an application's history: that version's ``report.history.read_history`` for the app of
    the newest job (10 earlier runs, scope user).
  Rows returned are kept next to the times: a query that finds nothing is not fast.

Targets (at the last checkpoint): series per job <= 1.2, data directory <= 1/5 of today's,
memory <= 1/2, every time no slower than today's, the report < 0.5 s.
Figures go to bench-results/bench_store.json.

    .venv/bin/python benchmarks/bench_store.py [--quick] [--jobs N] [--at N,N,...] [--base REV]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results" / "bench_store.json"
LOG_DIR = ROOT / "tests/data/darshan/logs"
# small bundled logs: 11 to 21 points each in today's layout (a job is one of them)
LOGS = (
    "mpi-io-test-ppc64-3.1.5.darshan",
    "mpi-io-test-x86_64-3.4.6.darshan",
    "mpi-io-test-x86_64-3.5.0.darshan",
    "skew-autobench-ior.darshan",
    "snyder_ior-POSIX_id1057716-202103_11-8-64415-6936117869459351096_1.darshan",
    "shane_ior-HDF5_id438090-438090_11-9-41522-17417065676046418211_1.darshan",
    "shane_ior-PNETCDF_id438100-438100_11-9-41525-10280033558448664385_1.darshan",
    "partial_data_dxt.darshan",
)
DB = "hpcmon"
CLUSTER = "bench"
PER_DAY = 5_000
USERS, APPS_PER_USER = 300, 3
FIRST_JOB = 4_000_000  # Slurm ids FIRST_JOB + k
DAY = 86_400
# The database's shard group duration, both layouts: the bounded series (users', apps') are
# counted once per shard that holds them, so longer shards count them fewer times
# (docs/site-scale.md). InfluxDB starts shard groups at multiples of the duration since
# 0001-01-01: the 20 days from 2025-01-01 lie in 3 shards of 7 days, 2 of 30 days.
SHARD_DURATION = "7d"
INDEX = "job_index"  # the one series a job adds (post_job/layout.py)
START = 1_735_689_600  # 2025-01-01T00:00:00Z: job k starts START + k * DAY / PER_DAY
TEMPLATE_JOB = "987654"
BATCH = 10_000  # lines per /write request
DATA_SETTINGS = (  # see the docstring: time compressed as the jobs are
    '  cache-snapshot-write-cold-duration = "10s"\n  compact-full-write-cold-duration = "30s"\n'
)
# a busy 2-core machine takes more than the default 10 s for 10,000 lines of new series
WRITE_TIMEOUT = '[coordinator]\n  write-timeout = "10m"\n'
LAYOUTS = ("old", "new")
TARGETS = {"series_per_job": 1.2, "data_ratio": 0.2, "memory_ratio": 0.5, "report_s": 0.5}
WORKER_FLAG = "--worker"


# ------------------------------------------------------------------ versions of the code
def base_revision(requested: str | None) -> str:
    if requested:
        return requested
    for other in ("origin/HEAD", "origin/main", "origin/master", "main"):
        found = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", other], capture_output=True, text=True
        )
        if found.returncode == 0:
            return found.stdout.strip()
    return "df53268"


def package_path(tree: Path, into: Path) -> Path:
    """A directory for PYTHONPATH with an ``hpcmon`` package of symlinks into ``tree``."""
    package = into / "hpcmon"
    package.mkdir(parents=True)
    for entry in (tree / "src/hpcmon").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in ("post_job", "report", "dashboards", "exporter"):
        if not (package / name).exists():  # a revision before the src layout kept them at the root
            (package / name).symlink_to(tree / name)
    return into


@contextlib.contextmanager
def base_worktree(revision: str, tmp: Path):
    tree = tmp / "base"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
        )  # fmt: skip


def version_env(path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(path)
    return env


def hook_lines(env: dict[str, str], log: Path) -> list[str]:
    """The hook's line protocol for one log, as ``hpcmon-post-job`` writes it to stdout."""
    done = subprocess.run(
        [
            sys.executable, "-m", "hpcmon.post_job", "--job-id", TEMPLATE_JOB,
            "--cluster", CLUSTER, "--user", "template-user", "--app", "template-app",
            "--darshan", str(log),
        ],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"hook on {log.name}: exit {done.returncode}: {done.stderr[-2000:]}")
    return [line for line in done.stdout.splitlines() if line]


# ------------------------------------------------------------------ the jobs
class Jobs:
    """Job k's points in either layout (templates from the base's hook)."""

    def __init__(self, templates: dict[str, list]) -> None:
        from hpcmon.post_job.migrate import migrated_points
        from hpcmon.post_job.model import JobContext
        from hpcmon.post_job.points import Point
        from hpcmon.post_job.slurm import SlurmJob
        from hpcmon.post_job.slurm_points import slurm_job_point

        self.Point, self.JobContext, self.SlurmJob = Point, JobContext, SlurmJob
        self.slurm_job_point, self.migrated_points = slurm_job_point, migrated_points
        self.encoder = Encoder()
        self.templates = [templates[name] for name in LOGS]
        self.first_second = [
            min(p.time_ns for p in points if p.time_ns is not None) // 1_000_000_000
            for points in self.templates
        ]
        rng = random.Random(31)
        self.app_of = [rng.randrange(USERS * APPS_PER_USER) for _ in range(1_000_000)]

    @staticmethod
    def job_id(k: int) -> str:
        return str(FIRST_JOB + k)

    @staticmethod
    def start(k: int) -> int:
        return START + k * DAY // PER_DAY

    def identity(self, k: int) -> tuple[str, str, int]:
        a = self.app_of[k % len(self.app_of)]
        user = a // APPS_PER_USER
        return f"user{user:03d}", f"app{user:03d}-{a % APPS_PER_USER}", a % len(LOGS)

    def points(self, k: int) -> list:
        """Job k in today's layout: its log's points re-tagged and shifted, and slurm_job."""
        Point = self.Point
        job_id = self.job_id(k)
        user, app, log = self.identity(k)
        start = self.start(k)
        shift_s = start - self.first_second[log]
        shift_ns = shift_s * 1_000_000_000
        out = []
        for p in self.templates[log]:
            tags = dict(p.tags)
            tags["jobid"], tags["user"], tags["app"] = job_id, user, app
            fields = dict(p.fields)
            for name in ("start_time", "end_time"):
                if isinstance(fields.get(name), int | float) and not isinstance(fields[name], bool):
                    fields[name] += shift_s
            if fields.get("job_id") == TEMPLATE_JOB:
                fields["job_id"] = job_id
            time_ns = None if p.time_ns is None else p.time_ns + shift_ns
            out.append(Point(p.measurement, tags, fields, time_ns))
        runtime = 60 + (k * 7919) % 3600
        slurm = self.SlurmJob(
            job_id, user, None, float(start), float(start + runtime), job_name=app,
            partition="batch", nodelist=f"n[{k % 500:03d}-{k % 500 + 3:03d}]", num_nodes=4,
            account=f"acct{int(user[4:]) % 40:02d}", exit_code=1 if k % 20 == 0 else 0,
            exit_signal=0,
        )  # fmt: skip
        point = self.slurm_job_point(slurm, self.JobContext(job_id, CLUSTER, user, app))
        point.tags.update(user=user, app=app)  # identify() adds them to the record too
        out.append(point)
        return out

    def lines(self, k: int, layout: str, check: bool = False) -> list[str]:
        points = self.points(k)
        if layout == "new":
            user, app, _ = self.identity(k)
            context = self.JobContext(self.job_id(k), CLUSTER, user, app)
            points = self.migrated_points(points, context)
        lines = [line for line in map(self.encoder.line, points) if line]
        if check:  # the cached encoder gives Point.to_line()'s lines
            assert lines == [line for line in (p.to_line() for p in points) if line], k
        return lines


class Encoder:
    """Point.to_line() with each field's and tag's encoding kept: most values recur from job
    to job, and the project's encoder takes a few milliseconds for a job's 60-field points."""

    def __init__(self) -> None:
        from hpcmon.post_job import points

        self.points = points
        self.fields: dict[tuple, str] = {}
        self.tags: dict[tuple, str] = {}
        self.names: dict[str, str] = {}

    def line(self, point) -> str:
        encoded = []
        for key in sorted(point.fields):
            value = point.fields[key]
            if value is None:
                continue
            cached = (key, type(value), value)
            text = self.fields.get(cached)
            if text is None:
                value_text = self.points.format_field(value)
                text = "" if value_text is None else f"{self.points.escape_key(key)}={value_text}"
                self.fields[cached] = text
            if text:
                encoded.append(text)
        if not encoded:
            return ""
        head = self.names.get(point.measurement)
        if head is None:
            head = self.names[point.measurement] = self.points.escape_measurement(point.measurement)
        parts = [head]
        for key in sorted(point.tags):
            value = point.tags[key]
            if value is None or value == "":
                continue
            text = self.tags.get((key, value))
            if text is None:
                escape = self.points.escape_key
                text = self.tags[(key, value)] = f"{escape(key)}={escape(str(value))}"
            parts.append(text)
        line = ",".join(parts) + " " + ",".join(encoded)
        if point.time_ns is not None:
            line += f" {int(point.time_ns)}"
        return self.points.encodable(line)


def parse_points(lines: list[str]) -> list:
    from hpcmon.post_job.points import Point
    from tests.post_job.lineprotocol_parse import parse_line

    return [Point(*parse_line(line)) for line in lines]


def templates_and_check(base_env: dict[str, str], new_env: dict[str, str]) -> tuple[dict, dict]:
    """Today's points per log (the base's hook), and per log whether this tree's hook gives
    exactly migrated_points() of them (the migration the new layout is measured as)."""
    from hpcmon.post_job.migrate import migrated_points
    from hpcmon.post_job.model import JobContext

    templates, checks = {}, {}
    context = JobContext(TEMPLATE_JOB, CLUSTER, "template-user", "template-app")
    for name in LOGS:
        old = hook_lines(base_env, LOG_DIR / name)
        new = hook_lines(new_env, LOG_DIR / name)
        templates[name] = parse_points(old)
        migrated = {p.to_line() for p in migrated_points(parse_points(old), context)}
        checks[name] = {
            "old_lines": len(old),
            "new_lines": len(new),
            "same_as_this_hook": migrated == set(new),
        }
    return templates, checks


# ------------------------------------------------------------------ the servers
class Store:
    """One layout's server, its writer connection and its query worker."""

    def __init__(self, layout: str, server, env: dict[str, str], shard_duration: str) -> None:
        self.layout, self.server, self.env = layout, server, env
        self.shard_duration = shard_duration
        self.connection: http.client.HTTPConnection | None = None
        self.write_s = 0.0
        self.lines = 0
        self.worker: subprocess.Popen | None = None

    def tune(self) -> None:
        self.server.stop()
        path = self.server.config_path
        text = path.read_text().replace("[data]\n", "[data]\n" + DATA_SETTINGS, 1)
        path.write_text(text + WRITE_TIMEOUT)
        self.server.start_again()
        self.server.query(f'CREATE DATABASE "{DB}" WITH SHARD DURATION {self.shard_duration}')

    def write(self, lines: list[str]) -> None:
        for at in range(0, len(lines), BATCH):
            body = ("\n".join(lines[at : at + BATCH]) + "\n").encode()
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.server.port, 600)
            started = time.perf_counter()
            self.connection.request("POST", f"/write?db={DB}&precision=ns", body)
            response = self.connection.getresponse()
            answer = response.read()
            self.write_s += time.perf_counter() - started
            if response.status != 204:
                raise RuntimeError(f"{self.layout}: /write {response.status}: {answer[:500]!r}")
            self.lines += min(BATCH, len(lines) - at)

    def vars(self) -> dict:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"{self.server.url}/debug/vars", timeout=60
        ) as response:
            return json.loads(response.read())

    def busy(self) -> float:
        """Cached bytes plus compactions queued or running (0 once settled)."""
        total = 0.0
        for value in self.vars().values():
            if not isinstance(value, dict):
                continue
            values = value.get("values", {})
            if value.get("name") == "tsm1_cache":
                total += values.get("memBytes", 0)
            elif value.get("name") == "tsm1_engine":
                total += sum(v for k, v in values.items() if k.endswith(("Active", "Queue")))
        return total

    def restart(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        self.server.stop()
        self.server.start_again()

    def query(self, q: str, timeout: float = 600) -> dict:
        data = urllib.parse.urlencode({"db": DB, "q": q}).encode()
        request = urllib.request.Request(f"{self.server.url}/query", data=data, method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=timeout) as response:
            return json.loads(response.read())

    def series(self, measurement: str | None = None) -> int:
        """Series of the database (summed over its measurements), or of one measurement."""
        where = f' FROM "{measurement}"' if measurement else ""
        answer = self.query(f"SHOW SERIES EXACT CARDINALITY{where}")
        return sum(
            int(values[0])
            for result in answer.get("results", [])
            for series in result.get("series", [])
            for values in series.get("values", [])
        )

    def shards(self) -> int:
        """The database's shards (its series are counted once in each that holds them)."""
        answer = self.query("SHOW SHARDS")
        return sum(
            len(series.get("values", []))
            for result in answer.get("results", [])
            for series in result.get("series", [])
            if series.get("name") == DB
        )

    def disk_bytes(self) -> dict:
        """Allocated bytes (du) of the data and wal directories, and of their parts: the
        series file (data/DB/_series), the TSI index (.../index), TSM files, the rest."""
        out = dict.fromkeys(("data", "wal", "series_file", "tsi_index", "tsm", "other"), 0)
        for name in ("data", "wal"):
            for folder, _, files in os.walk(self.server.workdir / name):
                for file in files:
                    path = os.path.join(folder, file)
                    size = os.lstat(path).st_blocks * 512
                    out[name] += size
                    if name == "wal":
                        continue
                    parts = Path(path).parts
                    part = (
                        "series_file" if "_series" in parts
                        else "tsi_index" if "index" in parts
                        else "tsm" if file.endswith(".tsm")
                        else "other"
                    )  # fmt: skip
                    out[part] += size
        return out

    def anon_mb(self) -> float:
        status = Path(f"/proc/{self.server.proc.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    # the worker: this layout's version of the report, dashboards and history code
    def start_worker(self) -> None:
        self.worker = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, self.server.url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, text=True, cwd=ROOT,
        )  # fmt: skip

    def ask(self, **request) -> dict:
        assert self.worker is not None and self.worker.stdin and self.worker.stdout
        self.worker.stdin.write(json.dumps(request) + "\n")
        self.worker.stdin.flush()
        line = self.worker.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.layout}: the worker ended")
        return json.loads(line)

    def stop_worker(self) -> None:
        if self.worker is not None:
            assert self.worker.stdin is not None  # started with stdin=PIPE
            with contextlib.suppress(OSError):
                self.worker.stdin.close()
            self.worker.wait(timeout=30)
            self.worker = None


def settle(stores: list[Store], timeout: float = 900) -> float:
    """Wait until every server has written its cache and finished its compactions."""
    started = time.monotonic()
    quiet = dict.fromkeys(s.layout for s in stores)
    while time.monotonic() - started < timeout:
        for store in stores:
            quiet[store.layout] = (quiet[store.layout] or 0) + 1 if store.busy() == 0 else 0
        if all(count and count >= 3 for count in quiet.values()):
            break
        time.sleep(5)
    return time.monotonic() - started


# ------------------------------------------------------------------ the worker process
def worker(url: str) -> int:
    """Answer timing requests with this process's hpcmon (the PYTHONPATH's version)."""
    import hpcmon.report.cli as report_cli
    from hpcmon.dashboards.config import Config
    from hpcmon.dashboards.generate import dashboards
    from hpcmon.dashboards.lint import influxql_queries, substitute_variables
    from hpcmon.report.history import read_history
    from hpcmon.report.influx import InfluxSettings

    settings = InfluxSettings(v1_url=url, database=DB, timeout=600)
    tables: dict[str, str] = {}
    for model in dashboards(Config(cluster=CLUSTER)).values():
        for where, query in influxql_queries(model):
            if "Finished jobs by I/O score" in where:
                tables["score"] = query
            elif "'Finished jobs'" in where:
                tables["slurm"] = query
    # the job drill-down's InfluxDB variables that follow the chosen job (its window, user,
    # app, start: what Grafana asks before any panel), in their order, each with the values
    # of those before it, as that version generates them (not the job list: the time range's)
    lookups = [
        (variable["name"], variable["query"])
        for variable in dashboards(Config(cluster=CLUSTER))["hpcmon-job"]["templating"]["list"]
        if (variable.get("datasource") or {}).get("type") == "influxdb"
        and variable["name"] != "jobid"
    ]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def influxql(query: str) -> tuple[int, list[str], object]:
        """Rows, errors and the first value (as a Grafana variable takes it) of one
        request, epoch ms, as Grafana asks."""
        data = urllib.parse.urlencode({"db": DB, "q": query, "epoch": "ms"}).encode()
        request = urllib.request.Request(f"{url}/query", data=data, method="POST")
        with opener.open(request, timeout=600) as response:
            answer = json.loads(response.read())
        rows, errors, first = 0, [], None
        for result in answer.get("results", []):
            if "error" in result:
                errors.append(result["error"])
            for series in result.get("series", []):
                rows += len(series.get("values", []))
                if first is None and series.get("values"):
                    first = series["values"][0][1]
        return rows, errors, first

    def drill_down(job: str) -> dict:
        known: dict[str, str] = {"jobid": job}
        rows, errors, asked = 0, [], 0
        for name, query in lookups:
            wanted = set(re.findall(r"\$\{?(\w+)", query))
            if not wanted <= set(known):  # a variable of the time range or the panels
                continue
            found, failed, value = influxql(substitute_variables(query, known))
            rows, errors, asked = rows + found, errors + failed, asked + 1
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            known[name] = "" if value is None else str(value)
        return {"rows": rows, "errors": errors, "queries": asked}

    def report(job: str) -> dict:
        out, err = io.StringIO(), io.StringIO()
        argv = [
            "--job-id", job, "--cluster", CLUSTER, "--influx.v1-url", url,
            "--influx.database", DB, "--timeout", "600",
        ]  # fmt: skip
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = report_cli.main(argv)
        notes = [line for line in err.getvalue().splitlines() if line]
        return {"exit": code, "chars": len(out.getvalue()), "notes": notes[:6]}

    def job_list(table: str, start_ms: int, end_ms: int) -> dict:
        query = substitute_variables(
            tables[table], {"timeFilter": f"time >= {start_ms}ms and time <= {end_ms}ms"}
        )
        rows, errors, _ = influxql(query)
        return {"rows": rows, "errors": errors}

    def history(job: str) -> dict:
        found, why = read_history(settings, job, CLUSTER, 10, "user")
        return {"runs": len(found.runs) if found else 0, "why": why}

    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            if op == "describe":
                answer = {"report_code": report_cli.__file__, "tables": tables}
            else:
                action = {
                    "report": report,
                    "job_list": job_list,
                    "history": history,
                    "drill_down": drill_down,
                }[op]
                started = time.perf_counter()
                answer = action(**request)
                answer["seconds"] = time.perf_counter() - started
        except Exception as exc:  # noqa: BLE001 - said in the answer, the run goes on
            answer = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


# ------------------------------------------------------------------ a checkpoint
def timed_queries(stores: list[Store], jobs: Jobs, n: int, repeats: int) -> dict:
    """name -> layout -> {seconds (median), runs, what the last run returned}."""
    last_start = jobs.start(n - 1)
    end_ms = (last_start + 3600) * 1000
    first, middle, last = min(n // 4, PER_DAY // 2), n // 2, n - 1  # first: day 0
    requests: dict[str, dict] = {
        "report first day": {"op": "report", "job": jobs.job_id(first)},
        "report middle day": {"op": "report", "job": jobs.job_id(middle)},
        "report last day": {"op": "report", "job": jobs.job_id(last)},
    }
    for table in ("score", "slurm"):
        for days in (1, 7, 30):
            requests[f"job list {table} {days}d"] = {
                "op": "job_list", "table": table,
                "start_ms": end_ms - days * DAY * 1000, "end_ms": end_ms,
            }  # fmt: skip
    requests["app history"] = {"op": "history", "job": jobs.job_id(last)}
    requests["drill-down job lookup"] = {"op": "drill_down", "job": jobs.job_id(middle)}
    out: dict = {}
    for name, request in requests.items():
        times: dict[str, list[float]] = {s.layout: [] for s in stores}
        answers: dict[str, dict] = {}
        rounds = repeats
        done = 0
        while done < rounds:
            for store in stores:  # interleaved, run by run
                answer = store.ask(**request)
                answers[store.layout] = answer
                if "seconds" in answer:
                    times[store.layout].append(answer["seconds"])
            done += 1
            slowest = max((max(t) for t in times.values() if t), default=0.0)
            if done == 1 and slowest > 5:  # a slow query: fewer runs (said in the figures)
                rounds = min(rounds, 2)
        out[name] = {
            layout: {
                "seconds": statistics.median(times[layout]) if times[layout] else None,
                "runs": len(times[layout]),
                **{k: v for k, v in answers[layout].items() if k != "seconds"},
            }
            for layout in times
        }
        print(
            f"    {name:<22} "
            + "  ".join(f"{layout} {_fmt_s(out[name][layout]['seconds'])}" for layout in LAYOUTS),
            flush=True,
        )
    return out


def checkpoint(stores: list[Store], jobs: Jobs, n: int, repeats: int, rates: dict) -> dict:
    settled = settle(stores)
    print(f"  settled in {settled:.0f} s; restarting both servers", flush=True)
    for store in stores:
        store.restart()
    time.sleep(5)
    idle = {store.layout: store.anon_mb() for store in stores}
    for store in stores:  # warm-up: a report and the job list of the last day
        store.ask(op="report", job=jobs.job_id(n - 1))
        end_ms = (jobs.start(n - 1) + 3600) * 1000
        store.ask(op="job_list", table="score", start_ms=end_ms - DAY * 1000, end_ms=end_ms)
    figures: dict = {"jobs": n, "settle_s": round(settled, 1)}
    for store in stores:
        disk = store.disk_bytes()
        figures[store.layout] = {
            "anon_mb": round(store.anon_mb(), 1),
            "anon_mb_before_warm_up": round(idle[store.layout], 1),
            "disk_bytes": disk["data"] + disk["wal"],
            **{f"{part}_bytes": size for part, size in disk.items()},
            "lines": store.lines,
            "write_lines_per_s": round(rates[store.layout]),
        }
    for store in stores:
        started = time.perf_counter()
        series = store.series()
        figures[store.layout].update(
            series=series,
            series_per_job=round(series / n, 3),
            cardinality_query_s=round(time.perf_counter() - started, 2),
            index_series=store.series(INDEX),
            shards=store.shards(),
        )
    print(
        "  "
        + "; ".join(
            f"{layout}: {figures[layout]['series']:,} series, "
            f"{figures[layout]['disk_bytes'] / 2**20:.1f} MiB, "
            f"RssAnon {figures[layout]['anon_mb']:.0f} MiB"
            for layout in LAYOUTS
        ),
        flush=True,
    )
    figures["queries"] = timed_queries(stores, jobs, n, repeats)
    return figures


# ------------------------------------------------------------------ the table
def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return new / old


def summarize(results: dict) -> list[dict]:
    """Rows of the table (one per figure) and the targets' verdicts at the last checkpoint."""
    rows = []
    points = results["checkpoints"]

    def row(name: str, pick, fmt, target: str = "", met=None) -> None:
        cells = []
        for cp in points:
            old, new = pick(cp, "old"), pick(cp, "new")
            cells.append((fmt(old), fmt(new), _ratio(new, old)))
        rows.append({"figure": name, "cells": cells, "target": target, "met": met})

    last = points[-1]
    per_job = last["new"]["series_per_job"]
    row(
        "series", lambda cp, lay: cp[lay]["series"], lambda v: f"{v:,}",
        f"<= {TARGETS['series_per_job']}/job (new: {per_job:.2f})",
        per_job <= TARGETS["series_per_job"],
    )  # fmt: skip
    row("series per job", lambda cp, lay: cp[lay]["series_per_job"], lambda v: f"{v:.2f}")
    row("  of them job_index", lambda cp, lay: cp[lay]["index_series"], lambda v: f"{v:,}")
    row("shards", lambda cp, lay: cp[lay]["shards"], str)
    disk = _ratio(last["new"]["disk_bytes"], last["old"]["disk_bytes"])
    row(
        "data+wal MiB", lambda cp, lay: cp[lay]["disk_bytes"], lambda v: f"{v / 2**20:.1f}",
        f"ratio <= {TARGETS['data_ratio']}", disk is not None and disk <= TARGETS["data_ratio"],
    )  # fmt: skip
    memory = _ratio(last["new"]["anon_mb"], last["old"]["anon_mb"])
    row(
        "influxd RssAnon MiB", lambda cp, lay: cp[lay]["anon_mb"], lambda v: f"{v:.0f}",
        f"ratio <= {TARGETS['memory_ratio']}",
        memory is not None and memory <= TARGETS["memory_ratio"],
    )  # fmt: skip
    row(
        "RssAnon before warm-up",
        lambda cp, lay: cp[lay]["anon_mb_before_warm_up"],
        lambda v: f"{v:.0f}",
    )
    for part in ("tsm", "tsi_index", "series_file", "wal"):
        row(
            f"  {part} MiB",
            lambda cp, lay, p=part: cp[lay][f"{p}_bytes"],
            lambda v: f"{v / 2**20:.1f}",
        )
    row(
        "write lines/s", lambda cp, lay: cp[lay]["write_lines_per_s"], lambda v: f"{v:,.0f}"
    )  # fmt: skip
    for name in last["queries"]:
        new_s = last["queries"][name]["new"]["seconds"]
        old_s = last["queries"][name]["old"]["seconds"]
        met = new_s is not None and old_s is not None and new_s <= old_s
        target = "new <= old"
        if name.startswith("report"):
            target += f", < {TARGETS['report_s']} s"
            met = met and new_s is not None and new_s < TARGETS["report_s"]
        elif name.startswith("drill-down"):  # the release before had no job index to read:
            target = f"< {TARGETS['report_s']} s, as the report"  # no ratio to meet
            met = new_s is not None and new_s < TARGETS["report_s"]
        row(
            name + " (s)", lambda cp, lay, n=name: cp["queries"][n][lay]["seconds"], _fmt_s,
            target, met,
        )  # fmt: skip
    return rows


def print_table(results: dict, rows: list[dict]) -> None:
    sizes = [cp["jobs"] for cp in results["checkpoints"]]
    head = f"{'':<24}" + "".join(f"{f'{n:,} jobs: old / new (new/old)':>38}" for n in sizes)
    print("\n" + head + "   target at the last checkpoint")
    for item in rows:
        text = f"{item['figure']:<24}"
        for old, new, ratio in item["cells"]:
            ratio_text = "" if ratio is None else f"({ratio:.2f})"
            text += f"{old:>14} / {new:>12} {ratio_text:>8}"
        if item["target"]:
            text += f"   {item['target']}: {'met' if item['met'] else 'NOT met'}"
        print(text)
    counts = []
    for cp in results["checkpoints"]:
        for name, by_layout in cp["queries"].items():
            old, new = by_layout["old"], by_layout["new"]
            for key in ("rows", "runs", "chars", "exit"):
                if key in old and old.get(key) != new.get(key):
                    where = f"  {cp['jobs']:,} jobs, {name}: {key}"
                    counts.append(f"{where} old {old.get(key)} new {new.get(key)}")
            for layout, answer in by_layout.items():
                if answer.get("error") or answer.get("errors"):
                    counts.append(
                        f"  {cp['jobs']:,} jobs, {name} ({layout}): "
                        f"{answer.get('error') or answer.get('errors')}"
                    )
    if counts:
        print("\nwhat the two layouts' queries returned differently (a time means little if so):")
        print("\n".join(counts))


# ------------------------------------------------------------------ main
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, checkpoints 2,500/5,000")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--at", default=None, help="checkpoints, e.g. 25000,50000,100000")
    parser.add_argument("--base", default=None, help="the release of today's layout (a rev)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per timed query")
    parser.add_argument(
        "--shard-duration",
        default=SHARD_DURATION,
        help=f"the database's SHARD DURATION, both layouts (default {SHARD_DURATION})",
    )
    args = parser.parse_args(argv)
    jobs_total = 5_000 if args.quick else args.jobs
    if args.at:
        at = sorted({int(x) for x in args.at.split(",")})
    elif args.quick:
        at = [jobs_total // 2, jobs_total]
    else:
        at = sorted({n for n in (25_000, 50_000, 100_000) if n < jobs_total} | {jobs_total})
    at = [n for n in at if 0 < n <= jobs_total]
    repeats = args.repeats or (3 if args.quick else 7)
    sys.path.insert(0, str(ROOT))
    from devtools.servers import run_influxdb1

    began = time.perf_counter()
    revision = base_revision(args.base)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", revision],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    diff = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "HEAD"], capture_output=True, check=True
    ).stdout  # the new layout is this tree as it is now: uncommitted changes included
    results: dict = {
        "tree": {
            "head": subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True, text=True, check=True,
            ).stdout.strip(),
            "uncommitted_diff_sha1": hashlib.sha1(diff).hexdigest(),
        },  # fmt: skip
        "jobs": jobs_total, "per_day": PER_DAY, "users": USERS, "apps_per_user": APPS_PER_USER,
        "logs": list(LOGS), "base": commit, "repeats": repeats, "batch_lines": BATCH,
        "influxdb": "1.6.7, index-version tsi1", "shard_duration": args.shard_duration,
        "targets": TARGETS, "checkpoints": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp_name:
        tmp = Path(tmp_name)
        with base_worktree(commit, tmp) as tree:
            base_env = version_env(package_path(tree, tmp / "base-path"))
            new_env = version_env(package_path(ROOT, tmp / "new-path"))
            templates, checks = templates_and_check(base_env, new_env)
            results["log_check"] = checks
            print(f"today's layout: the hook of {commit} (worktree {tree})")
            for name, check in checks.items():
                print(
                    f"  {name[:44]:<44} {check['old_lines']:>3} lines old, "
                    f"{check['new_lines']:>3} new; migrated_points(old) == this tree's hook: "
                    f"{check['same_as_this_hook']}"
                )
            jobs = Jobs(templates)
            for layout in LAYOUTS:  # the cached encoder against Point.to_line()
                for k in range(min(200, jobs_total)):
                    jobs.lines(k, layout, check=True)
            limits = {"max_series_per_database": 0, "max_values_per_tag": 0}
            with (
                run_influxdb1(index="tsi1", **limits) as old_server,
                run_influxdb1(index="tsi1", **limits) as new_server,
            ):
                stores = [
                    Store("old", old_server, base_env, args.shard_duration),
                    Store("new", new_server, new_env, args.shard_duration),
                ]
                for store in stores:
                    store.tune()
                    store.start_worker()
                results["code"] = {s.layout: s.ask(op="describe") for s in stores}
                try:
                    written = 0
                    for n in at:
                        before = {s.layout: (s.lines, s.write_s) for s in stores}
                        generate_s = 0.0
                        for block in range(written, n, 5_000):
                            ks = range(block, min(n, block + 5_000))
                            for store in stores:  # one after the other: rates undisturbed
                                started = time.perf_counter()
                                lines = [ln for k in ks for ln in jobs.lines(k, store.layout)]
                                generate_s += time.perf_counter() - started
                                store.write(lines)
                        written = n
                        rates = {
                            s.layout: (s.lines - before[s.layout][0])
                            / max(1e-9, s.write_s - before[s.layout][1])
                            for s in stores
                        }
                        print(
                            f"\n{n:,} jobs written ({time.perf_counter() - began:.0f} s in;"
                            f" lines generated in {generate_s:.0f} s): "
                            + ", ".join(f"{k} {v:,.0f} lines/s" for k, v in rates.items()),
                            flush=True,
                        )
                        figures = checkpoint(stores, jobs, n, repeats, rates)
                        figures["generate_s"] = round(generate_s, 1)
                        results["checkpoints"].append(figures)
                finally:
                    for store in stores:
                        store.stop_worker()
    results["run_s"] = round(time.perf_counter() - began, 1)
    rows = summarize(results)
    results["table"] = rows
    results["targets_met"] = {row["figure"]: row["met"] for row in rows if row["target"]}
    print_table(results, rows)
    print(f"\nrun: {results['run_s']:.0f} s")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"figures: {RESULTS}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER_FLAG:
        raise SystemExit(worker(sys.argv[2]))
    raise SystemExit(main(sys.argv[1:]))
