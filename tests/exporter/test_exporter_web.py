"""The exporter's HTTP side: landing page, TLS and basic auth from a web config file,
and isolation of a failing collector."""

from __future__ import annotations

import argparse
import base64
import logging
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hpcmon.common.config import ConfigError
from hpcmon.exporter.cli import Exporter, available_collectors, build_parser
from hpcmon.exporter.collector import Collector, Periodic, ProblemLog
from hpcmon.exporter.web import WebConfig, load_web_config, make_server
from tests.servers import free_port, run_exporter

BODY = b"# HELP demo_value A value.\n# TYPE demo_value gauge\ndemo_value 1.0\n"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate, installed behind symlinks the way certbot does."""
    directory = tmp_path_factory.mktemp("tls")
    archive = directory / "archive"
    live = directory / "live"
    archive.mkdir()
    live.mkdir()
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(archive / "privkey1.pem"),
            "-out",
            str(archive / "cert1.pem"),
        ],
        check=True,
        capture_output=True,
    )
    (live / "privkey.pem").symlink_to(archive / "privkey1.pem")
    (live / "cert.pem").symlink_to(archive / "cert1.pem")
    return live / "cert.pem", live / "privkey.pem"


def _serve(config: WebConfig, render=lambda timeout=None: BODY) -> Iterator[str]:
    port = free_port()
    server = make_server(f"127.0.0.1:{port}", "/metrics", render, config, "<html>landing</html>")
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    scheme = "https" if config.ssl_context else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str, auth: tuple[str, str] | None = None, cafile: Path | None = None):
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def test_plain_http_landing_and_metrics() -> None:
    for base in _serve(WebConfig()):
        status, body, headers = _get(base + "/metrics")
        assert status == 200 and body == BODY
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        status, body, _ = _get(base + "/")
        assert status == 200 and b"landing" in body
        assert _get(base + "/nope")[0] == 404


def test_tls_and_basic_auth_via_web_config(tmp_path: Path, certificate) -> None:
    cert, key = certificate
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config_file = tmp_path / "web.yml"
    config_file.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    config = load_web_config(str(config_file))
    for base in _serve(config):
        assert base.startswith("https://")
        status, body, _ = _get(base + "/metrics", auth=("prometheus", "s3cret"), cafile=cert)
        assert status == 200 and body == BODY
        # Second request is served from the verified-credential cache: still correct.
        assert _get(base + "/metrics", auth=("prometheus", "s3cret"), cafile=cert)[0] == 200
        status, _, headers = _get(base + "/metrics", auth=("prometheus", "wrong"), cafile=cert)
        assert status == 401 and "Basic" in headers["WWW-Authenticate"]
        assert _get(base + "/metrics", auth=("other", "s3cret"), cafile=cert)[0] == 401
        assert _get(base + "/metrics", cafile=cert)[0] == 401
        # Plain HTTP against the TLS port does not get metrics.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(base.replace("https", "http") + "/metrics", timeout=5)


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path, certificate) -> None:
    cert, key = certificate
    (tmp_path / "c.pem").symlink_to(cert)
    (tmp_path / "k.pem").symlink_to(key)
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    assert load_web_config(str(tmp_path / "web.yml")).ssl_context is not None


@pytest.mark.parametrize(
    "text, message",
    [
        ("tls_server_config:\n  cert_file: a.pem\n", "cert_file and key_file"),
        ("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash"),
        ("- a list\n", "must be a mapping"),
        ("tls_server_config: {cert_file: [\n", "invalid YAML"),
    ],
)
def test_bad_web_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_web_config(str(path))


class _Fixed(Collector):
    name = "fixed"
    description = "test collector"

    def exposition(self) -> bytes:
        return BODY


class _Broken(Collector):
    name = "broken"
    description = "test collector that fails"

    def exposition(self) -> bytes:
        raise RuntimeError("backend exploded")


def test_a_failing_collector_does_not_fail_the_scrape() -> None:
    exporter = Exporter([_Broken(argparse.Namespace()), _Fixed(argparse.Namespace())])
    for base in _serve(WebConfig(), render=exporter.render):
        status, body, _ = _get(base + "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert families["demo_value"].samples[0].value == 1.0
    success = {
        s.labels["collector"]: s.value
        for s in families["hpcmon_exporter_collector_success"].samples
    }
    assert success == {"broken": 0.0, "fixed": 1.0}


@pytest.mark.integration
def test_prometheus_scrapes_through_tls_and_basic_auth(
    tmp_path: Path, certificate, prometheus_factory
) -> None:
    """A real exporter process behind the web config; Prometheus with the right password gets
    the metrics, with a wrong one the target is down (401)."""
    cert, key = certificate
    hashed = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    (jobs_dir / "777").write_text("SLURM_JOB_UID=1234\n")
    args = [
        f"--web.config.file={web}",
        "--no-collector.jobstats",
        "--collector.jobs",
        f"--path.cgroupfs={tmp_path / 'no-cgroups'}",
        f"--jobs.dir={jobs_dir}",
    ]
    with run_exporter(args, tmp_path) as exporter:
        tls = {"ca_file": str(cert), "server_name": "localhost"}
        target = {
            "static_configs": [{"targets": [exporter.address]}],
            "scheme": "https",
            "tls_config": tls,
        }
        prom = prometheus_factory(
            [
                {
                    "job_name": "good",
                    "basic_auth": {"username": "prometheus", "password": "scrape-me"},
                    **target,
                },
                {
                    "job_name": "bad",
                    "basic_auth": {"username": "prometheus", "password": "wrong"},
                    **target,
                },
            ]
        )
        result = prom.wait_for('hpc_node_job_info{job="good"}')
        assert result[0]["metric"]["jobid"] == "777" and result[0]["metric"]["uid"] == "1234"
        up = {r["metric"]["job"]: r["value"][1] for r in prom.wait_for("up", min_results=2)}
        assert up == {"good": "1", "bad": "0"}
        bad = next(t for t in prom.targets() if t["labels"]["job"] == "bad")
        assert "401" in bad["lastError"]


def test_every_flag_with_a_default_states_it_in_its_help() -> None:
    parser = build_parser(available_collectors())
    for action in parser._actions:
        if action.default in (None, argparse.SUPPRESS):
            continue
        assert "default" in (action.help or ""), action.option_strings
    helps = {a.option_strings[0]: a.help or "" for a in parser._actions if a.option_strings}
    assert helps["--collector.jobstats"].endswith("(default on)")
    assert helps["--collector.geopm"].endswith("(default off)")
    assert helps["--jobstats.interval"].endswith("(default 10)")
    assert helps["--web.listen-address"].endswith("(default 127.0.0.1:19325)")


@pytest.mark.parametrize(
    ("repeat_seconds", "expected"),
    [
        (None, ["WARNING a", "DEBUG a", "WARNING b", "WARNING c", "WARNING a"]),
        (3600.0, ["WARNING a", "DEBUG a", "WARNING b", "WARNING c", "WARNING a"]),
        (0.0, ["WARNING a", "WARNING a", "WARNING b", "WARNING c", "WARNING a"]),
    ],
)
def test_problem_log_says_each_problem_once(
    caplog: pytest.LogCaptureFixture, repeat_seconds: float | None, expected: list[str]
) -> None:
    """Repeats go to DEBUG (or WARNING again after repeat_seconds); with room for two
    messages, the third one starts the memory afresh, so "a" is news again."""
    logger = logging.getLogger("hpcmon.test.problems")
    problems = ProblemLog(logger, repeat_seconds=repeat_seconds, limit=2)
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        for message in ["a", "a", "b", "c", "a"]:
            problems.warn(message)
    assert [f"{r.levelname} {r.getMessage()}" for r in caplog.records] == expected


def test_periodic_thread_outlives_a_failing_step_and_stops() -> None:
    calls: list[int] = []
    third = threading.Event()

    def step() -> None:
        calls.append(1)
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise RuntimeError("first step fails")

    periodic = Periodic("test-periodic", step, 0.01)
    periodic.start()
    try:
        assert third.wait(10)  # the failure of the first step did not end the thread
    finally:
        periodic.stop(timeout=10)
    assert not periodic.running
    stopped_at = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped_at
