"""Post-job writers against the real servers: InfluxDB 1.6.7 (read back with InfluxQL) and
VictoriaMetrics' InfluxDB v2 write endpoint through influxdb-client (read back via export)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from pathlib import Path

import pytest

from hpcmon.post_job.delivery import WriterSettings, ship, ship_to_server
from hpcmon.post_job.points import Point, to_lines
from hpcmon.post_job.writers import (
    Deadline,
    InfluxV1Writer,
    InfluxV2Writer,
    RejectedError,
    UnavailableError,
    deliver,
    read_token,
    write_line_file,
)
from tests import servers

pytestmark = pytest.mark.integration

BASE_NS = 1_700_000_000_000_000_000


def job_points(measurement: str, job_id: str, count: int) -> list[Point]:
    """Points shaped like a source's: base tags, odd tag values, every field type."""
    points = []
    for i in range(count):
        points.append(
            Point(
                measurement,
                {
                    "jobid": job_id,
                    "cluster": "test cluster",
                    "rank": str(i % 7),
                    "file": f"/scratch/a,b=c d/{i}",
                },
                {
                    "bytes": i * 1000,
                    "bw": i / 3 + 0.5,
                    "label": f'say "hi"\\ {i}',
                    "ok": i % 2 == 0,
                },
                BASE_NS + i * 1_000_000_000,
            )
        )
    return points


def counting(writer):
    """Wrap a real writer to count requests and lines (what reached the server)."""
    sent: list[int] = []
    original = writer.send

    def send(lines, timeout):
        original(lines, timeout)
        sent.append(len(lines))

    writer.send = send
    return writer, sent


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def non_http_service():
    """A listening port that answers like an SSH server: a URL pointing at the wrong service.
    (No real server here speaks a non-HTTP protocol on a port we can choose.)"""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def influx1_rows(server: servers.InfluxDB1, db: str, measurement: str) -> dict:
    """(tags) -> (time, fields) read back through InfluxQL."""
    rows = {}
    for series in server.series(f'SELECT * FROM "{measurement}" GROUP BY *', db=db):
        for values in series["values"]:
            record = dict(zip(series["columns"], values, strict=True))
            time_ns = record.pop("time")
            fields = {k: v for k, v in record.items() if v is not None}
            rows[(tuple(sorted(series["tags"].items())), time_ns)] = fields
    return rows


def expected_rows(points: list[Point]) -> dict:
    return {(tuple(sorted(p.tags.items())), p.time_ns): dict(p.fields) for p in points}


def test_influxdb1_round_trip_in_batches(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("rt1")
    points = job_points("pj_round_trip", "123.batch", 23)
    writer, sent = counting(InfluxV1Writer(influxdb1.url, "rt1"))
    settings = WriterSettings(v1_url=influxdb1.url, v1_database="rt1", batch_size=5)
    report = ship_to_server(to_lines(points).splitlines(), writer, settings, Deadline(30))
    assert (report.written, report.spooled, report.rejected, report.lost) == (23, 0, 0, 0)
    assert sent == [5, 5, 5, 5, 3]
    assert influx1_rows(influxdb1, "rt1", "pj_round_trip") == expected_rows(points)


def test_influxdb1_rewrite_is_idempotent(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("idem")
    points = job_points("pj_idem", "77", 10)
    settings = WriterSettings(v1_url=influxdb1.url, v1_database="idem")
    lines = to_lines(points).splitlines()
    for _ in range(2):
        [report] = ship(lines, settings, Deadline(30))
        assert report.written == 10
    count = influxdb1.series('SELECT count("bytes") FROM "pj_idem"', db="idem")
    assert count[0]["values"][0][1] == 10


def test_influxdb1_bisects_bad_lines_and_keeps_good(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    influxdb1.create_database("bisect")
    good = job_points("pj_bisect", "9", 16)
    lines = to_lines(good).splitlines()
    # a field type conflict (bytes is an integer field) and a line that does not parse
    conflict = 'pj_bisect,jobid=9,rank=1 bytes="text" 1700000000000000001'
    garbage = "pj_bisect,jobid=9 bytes= 1700000000000000002"
    lines.insert(3, conflict)
    lines.insert(11, garbage)
    settings = WriterSettings(v1_url=influxdb1.url, v1_database="bisect", spool_dir=str(tmp_path))
    writer, sent = counting(InfluxV1Writer(influxdb1.url, "bisect"))
    # the first line establishes the integer type before the conflicting one arrives
    writer.send([lines[0]], 5)
    report = ship_to_server(lines, writer, settings, Deadline(60))
    assert report.rejected == 2 and report.spooled == 0 and report.lost == 0
    assert report.written == 16
    assert influx1_rows(influxdb1, "bisect", "pj_bisect") == expected_rows(good)
    [rejected_file] = (tmp_path / "influx-v1" / "rejected").iterdir()
    kept = [json.loads(line) for line in rejected_file.read_text().splitlines()]
    assert sorted(item["line"] for item in kept) == sorted([conflict, garbage])
    assert all("HTTP 400" in item["error"] for item in kept)
    assert not list((tmp_path / "influx-v1").glob("*.spool"))


def test_influxdb1_chunk_refused_whole_is_rejected_in_one_request(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    """Every line refused (a field whose type changed, or nothing parses): no bisection."""
    influxdb1.create_database("whole")
    writer = InfluxV1Writer(influxdb1.url, "whole")
    writer.send(["pj_whole,jobid=1 bytes=1i 1"], 5)  # bytes is an integer field from now on
    attempts: list[int] = []
    send = writer.send

    def counted(lines, timeout):
        attempts.append(len(lines))
        send(lines, timeout)

    writer.send = counted
    conflicting = [f'pj_whole,jobid=1 bytes="{k}" {k + 10}' for k in range(8)]
    unparsable = [f"pj_whole,jobid=1 bytes= {k + 20}" for k in range(8)]
    for bad in (conflicting, unparsable):
        attempts.clear()
        outcome = deliver(writer, bad, Deadline(30))
        assert attempts == [8] and outcome.written == 0 and outcome.pending == []
        assert [line for line, _ in outcome.rejected] == bad
    # a conflict in part of the chunk: the rest was written, bisection finds the bad line
    mixed = ["pj_whole,jobid=1 bytes=2i 2", 'pj_whole,jobid=1 bytes="x" 3']
    attempts.clear()
    outcome = deliver(writer, [*mixed, "pj_whole,jobid=1 bytes=4i 4"], Deadline(30))
    assert [line for line, _ in outcome.rejected] == [mixed[1]] and outcome.written == 2
    assert attempts == [3, 1, 2, 1, 1]  # whole, [2i], [x, 4i], [x], [4i]
    assert (
        influxdb1.series('SELECT count("bytes") FROM "pj_whole"', db="whole")[0]["values"][0][1]
        == 3
    )


def test_influxdb1_unknown_database_is_spooled_not_rejected(
    influxdb1: servers.InfluxDB1, tmp_path: Path
) -> None:
    lines = to_lines(job_points("pj_nodb", "1", 4)).splitlines()
    settings = WriterSettings(
        v1_url=influxdb1.url, v1_database="does_not_exist", spool_dir=str(tmp_path)
    )
    [report] = ship(lines, settings, Deadline(30))
    assert (report.written, report.spooled, report.rejected) == (0, 4, 0)
    with pytest.raises(UnavailableError, match="404.*database not found"):
        InfluxV1Writer(influxdb1.url, "does_not_exist").send(lines, 5)


def test_influxdb1_basic_auth_header_from_env() -> None:
    writer = InfluxV1Writer("http://h:8086/", "db", "rp1", "user", "pw")
    assert writer.headers["Authorization"] == "Basic dXNlcjpwdw=="  # base64("user:pw")
    assert writer.url == "http://h:8086/write?db=db&precision=ns&rp=rp1"


def test_victoria_metrics_v2_round_trip(victoria_metrics: servers.VictoriaMetrics) -> None:
    job_id = f"vm-{uuid.uuid4().hex[:8]}"
    points = job_points("pj_vm", job_id, 12)
    writer, sent = counting(InfluxV2Writer(victoria_metrics.url, "org", "bucket", "tok"))
    settings = WriterSettings(
        v2_url=victoria_metrics.url, v2_org="org", v2_bucket="bucket", batch_size=5
    )
    report = ship_to_server(to_lines(points).splitlines(), writer, settings, Deadline(30))
    writer.close()
    assert report.written == 12 and sent == [5, 5, 2]
    rows = victoria_metrics.export(f'{{jobid="{job_id}"}}')
    got = {}
    for row in rows:
        metric = dict(row["metric"])
        name = metric.pop("__name__")
        metric.pop("db", None)
        for value, stamp in zip(row["values"], row["timestamps"], strict=True):
            got[(name, tuple(sorted(metric.items())), stamp)] = value
    want = {}
    for p in points:  # VictoriaMetrics keeps numbers (bool as 0/1) as measurement_field
        assert p.time_ns is not None
        for key, value in p.fields.items():
            if isinstance(value, str):
                continue
            want[(f"pj_vm_{key}", tuple(sorted(p.tags.items())), p.time_ns // 1_000_000)] = float(
                value
            )
    got = {key: value for key, value in got.items() if not key[0].endswith("_label")}
    assert got == pytest.approx(want)


def test_v2_writer_reports_unreachable_server_as_unavailable() -> None:
    writer = InfluxV2Writer(closed_port_url(), "o", "b", None, timeout=2)
    with pytest.raises(UnavailableError, match="cannot reach"):
        writer.send(["m v=1 1"], 2)
    writer.close()


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_wrong_service_is_unavailable_not_a_crash(api: str, tmp_path: Path) -> None:
    lines = ["m,jobid=1 v=1i 1", "m,jobid=1 v=2i 2"]
    with non_http_service() as url:
        settings = (
            WriterSettings(v1_url=url, v1_database="d", spool_dir=str(tmp_path))
            if api == "v1"
            else WriterSettings(v2_url=url, v2_org="o", v2_bucket="b", spool_dir=str(tmp_path))
        )
        [report] = ship(lines, settings, Deadline(10))
    assert (report.written, report.spooled, report.lost) == (0, 2, 0)
    kind = "influx-v1" if api == "v1" else "influx-v2"
    assert len(list((tmp_path / kind).glob("*.spool"))) == 1


def test_deliver_stops_at_outage_and_keeps_order() -> None:
    writer = InfluxV1Writer(closed_port_url(), "db")
    lines = [f"m v={i} {i}" for i in range(10)]
    outcome = deliver(writer, lines, Deadline(10), request_timeout=2)
    assert outcome.written == 0 and outcome.pending == lines
    assert "cannot reach" in (outcome.unavailable_reason or "")


def test_deliver_spools_everything_once_deadline_passed(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("late")
    lines = [f"m v={i} {i}" for i in range(5)]
    outcome = deliver(InfluxV1Writer(influxdb1.url, "late"), lines, Deadline(0))
    assert outcome.written == 0 and outcome.pending == lines
    assert outcome.unavailable_reason == "time limit reached"
    assert influxdb1.series("SELECT * FROM m", db="late") == []


def test_rejected_error_on_bad_line(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("bad")
    with pytest.raises(RejectedError, match="unable to parse"):
        InfluxV1Writer(influxdb1.url, "bad").send(["m v= 1"], 5)


def test_line_file_writer(tmp_path: Path, capsys) -> None:
    points = job_points("pj_file", "5", 3)
    lines = to_lines(points).splitlines()
    target = tmp_path / "out" / "job.lp"
    write_line_file(lines, target)
    assert target.read_text() == to_lines(points)
    write_line_file(lines[:1], target)  # replaced, not appended
    assert target.read_text() == lines[0] + "\n"
    assert [p.name for p in target.parent.iterdir()] == ["job.lp"]
    write_line_file(lines, None)
    assert capsys.readouterr().out == to_lines(points)


def test_token_from_file_then_env(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    assert read_token(token_file, {"INFLUX_TOKEN": "env"}) == "s3cret"
    assert read_token(None, {"INFLUX_TOKEN": "env"}) == "env"
    assert read_token(None, {}) is None
    with pytest.raises(ValueError, match="cannot read token file"):
        read_token(tmp_path / "missing", {})


def test_influxdb1_retention_policy(influxdb1: servers.InfluxDB1) -> None:
    influxdb1.create_database("rp_db")
    influxdb1.query('CREATE RETENTION POLICY "keep" ON "rp_db" DURATION INF REPLICATION 1')
    points = job_points("pj_rp", "rp", 3)
    settings = WriterSettings(v1_url=influxdb1.url, v1_database="rp_db", v1_retention_policy="keep")
    [report] = ship(to_lines(points).splitlines(), settings, Deadline(30))
    assert report.written == 3
    assert influxdb1.series('SELECT * FROM "pj_rp"', db="rp_db") == []  # not in the default RP
    series = influxdb1.series('SELECT count("bytes") FROM "rp_db"."keep"."pj_rp"', db="rp_db")
    assert series[0]["values"][0][1] == 3


def test_v1_credentials_from_files_a_secret_mounts(tmp_path: Path) -> None:
    """INFLUX_USERNAME_FILE / INFLUX_PASSWORD_FILE (the chart's flush CronJob mounts its
    Secret): the files' content, never the file names, become the credentials."""
    (tmp_path / "username").write_text("hpcmon\n")
    (tmp_path / "password").write_text("s3cret\n")
    settings = WriterSettings(v1_url="http://127.0.0.1:8086", v1_database="d")
    settings.add_secrets(
        None,
        {
            "INFLUX_USERNAME_FILE": str(tmp_path / "username"),
            "INFLUX_PASSWORD_FILE": str(tmp_path / "password"),
            "INFLUX_PASSWORD": "ignored when the file is given",
        },
    )
    assert (settings.v1_username, settings.v1_password) == ("hpcmon", "s3cret")
    with pytest.raises(ValueError, match="missing: cannot read"):
        settings.add_secrets(None, {"INFLUX_PASSWORD_FILE": str(tmp_path / "missing")})


@contextlib.contextmanager
def raw_http_answer(answer: bytes):
    """A port that reads a request and answers ``answer`` byte for byte, then hangs up: what
    a proxy in front of InfluxDB may send (no real one can run here)."""
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    requests.append(conn.recv(65536).split(b"\r\n", 1)[0])
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", requests
    finally:
        listener.close()


REDIRECT = b"HTTP/1.1 302 Found\r\nLocation: /sso/login\r\nContent-Length: 0\r\n\r\n"
OK_PAGE = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n<html>ok</>"
CUT_SHORT = b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n{"error":'


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (REDIRECT, "HTTP 302: redirected to /sso/login"),
        (OK_PAGE, "HTTP 200 from"),
        (CUT_SHORT, "HTTP 503"),
    ],
)
def test_v1_answers_that_are_no_acknowledgement_keep_the_lines(answer, reason) -> None:
    # a redirect followed would be a GET without the lines; a 200 page is a proxy's, not
    # InfluxDB's 204; a 503 whose body is cut short is still an outage, not a crash
    lines = ["m v=1i 1", "m v=2i 2"]
    with raw_http_answer(answer) as (url, requests):
        outcome = deliver(InfluxV1Writer(url, "db"), lines, Deadline(10), request_timeout=5)
    assert outcome.written == 0 and outcome.pending == lines and not outcome.rejected
    assert reason in (outcome.unavailable_reason or "")
    assert [request.split()[0] for request in requests] == [b"POST"]


def test_a_writer_failing_unexpectedly_keeps_the_lines() -> None:
    class Broken:
        kind = "broken"

        def describe(self) -> str:
            return "a writer with a bug"

        def send(self, lines, timeout):
            raise KeyError("a bug")

        def close(self) -> None:
            pass

    outcome = deliver(Broken(), ["m v=1i 1"], Deadline(10))
    assert outcome.pending == ["m v=1i 1"] and outcome.written == 0
    assert outcome.unavailable_reason == "unexpected failure (KeyError)"


def test_a_lone_surrogate_reaches_influxdb_and_the_lines_after_it_too(
    influxdb1: servers.InfluxDB1,
) -> None:
    # a non-UTF-8 path read with surrogateescape, or a JSON "\udce9" in a VizTracer trace:
    # before, encoding the request raised, and every line spooled after it waited forever
    influxdb1.create_database("surrogates")
    point = Point("m", {"function": "main (/home/ren\udce9/run.py:1)"}, {"v": 1}, 1)
    line = point.to_line()
    assert "ren\ufffd" in line
    spooled_earlier = 'm,function=x\ud83d file="a\udce9" 2'  # as a spool made before holds it
    outcome = deliver(
        InfluxV1Writer(influxdb1.url, "surrogates"), [line, spooled_earlier], Deadline(10)
    )
    assert (outcome.written, outcome.pending, outcome.rejected) == (2, [], [])
    rows = influxdb1.series("SELECT * FROM m GROUP BY *", db="surrogates")
    assert sorted(s["tags"]["function"] for s in rows) == [
        "main (/home/ren\ufffd/run.py:1)",
        "x\ufffd",
    ]
