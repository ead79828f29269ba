"""The exporter as a process, scraped by a real Prometheus, on a powercap tree whose
energy counters the test advances at a known power; and TLS with a symlinked certificate."""

from __future__ import annotations

import os
import ssl
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcmon.exporter.cli import available_collectors
from tests import servers
from tests.exporter import test_exporter_web
from tests.exporter.test_geopm_helpers import write_zone

pytestmark = pytest.mark.integration

# The exporter web tests' self-signed certificate behind certbot-like symlinks, shared.
shared_certificate = test_exporter_web.certificate

POWER_WATTS = {"0": 123.4, "1": 56.7}  # injected per package zone
MAX_RANGE_UJ = 262_143_328_850
WRAP_AFTER_S = 20  # package 0's counter wraps this long after the writer starts
START_UJ = {"0": MAX_RANGE_UJ - int(POWER_WATTS["0"] * 1e6 * WRAP_AFTER_S), "1": 5_000_000}


def exporter_args(sysfs: Path, *extra: str) -> list[str]:
    args = ["--no-collector.jobstats"] if "jobstats" in available_collectors() else []
    return [
        *args,
        "--collector.geopm",
        "--geopm.backend",
        "powercap",
        "--path.sysfs",
        str(sysfs),
        *extra,
    ]


class EnergyWriter(threading.Thread):
    """Advances each zone's energy_uj as the hardware would at a constant power (with the
    counter wrapping at max_energy_range_uj), rewriting the file every 10 ms."""

    def __init__(self, zones: dict[str, Path]) -> None:
        super().__init__(daemon=True)
        self.zones = zones
        self.halt = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.halt.is_set():
            elapsed = time.monotonic() - self.started_at
            for zone, path in self.zones.items():
                energy = int(START_UJ[zone] + POWER_WATTS[zone] * 1e6 * elapsed) % MAX_RANGE_UJ
                temporary = path / ".energy_uj.tmp"
                temporary.write_text(f"{energy}\n")
                os.replace(temporary, path / "energy_uj")
            self.halt.wait(0.01)


@pytest.fixture
def powercap_tree(tmp_path: Path) -> Iterator[Path]:
    zones = {
        zone: write_zone(tmp_path, zone, f"package-{zone}", START_UJ[zone]) for zone in POWER_WATTS
    }
    write_zone(tmp_path, "0:0", "dram", 1_000_000)
    writer = EnergyWriter(zones)
    writer.start()
    yield tmp_path
    writer.halt.set()
    writer.join()


def test_prometheus_rate_equals_injected_power(
    prometheus_factory, powercap_tree: Path, tmp_path: Path
) -> None:
    args = exporter_args(powercap_tree, "--geopm.interval", "0.2")
    with servers.run_exporter(args, tmp_path) as exporter:
        port = exporter.port
        scrape = {
            "job_name": "node",
            "scrape_interval": "1s",
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        }
        # Two servers scrape the same exporter: a scrape must not reset anything.
        proms = [prometheus_factory([scrape]), prometheus_factory([scrape])]
        prom = proms[0]
        window = 25
        for server in proms:
            server.wait_for('geopm_up{source="powercap"} == 1', timeout=60)
        for server in proms:  # enough scrapes to cover the whole window
            server.wait_for(
                f'count_over_time(geopm_cpu_energy_joules_total{{domain_index="0"}}'
                f"[{window + 3}s]) >= {window + 1}",
                timeout=window + 60,
            )
        for server in proms:
            result = server.query(f"rate(geopm_cpu_energy_joules_total[{window}s])")
            rates = {r["metric"]["domain_index"]: float(r["value"][1]) for r in result}
            for zone, watts in POWER_WATTS.items():
                assert rates[zone] == pytest.approx(watts, rel=0.01), (zone, rates)
        # The exported counter went past the hardware range: the wrap was seen and added back.
        low, high = (
            float(
                prom.query(f'{f}(geopm_cpu_energy_joules_total{{domain_index="0"}}[5m])')[0][
                    "value"
                ][1]
            )
            for f in ("min_over_time", "max_over_time")
        )
        assert low < MAX_RANGE_UJ / 1e6 < high, (low, high)
        power = prom.query(f"avg_over_time(geopm_cpu_power_watts[{window}s])")
        derived = {r["metric"]["domain_index"]: float(r["value"][1]) for r in power}
        # Each derived value covers one 0.2 s interval, so the writer's 10 ms steps and this
        # test's thread scheduling show through: a loose check (a unit error is 1e6 off).
        for zone, watts in POWER_WATTS.items():
            assert derived[zone] == pytest.approx(watts, rel=0.10), (zone, derived)
        resets = prom.query("resets(geopm_cpu_energy_joules_total[5m])")
        assert {r["metric"]["domain_index"]: r["value"][1] for r in resets} == {
            "0": "0",
            "1": "0",
        }  # package 0 wrapped, the exported counter never went down
        status, body = servers.http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60
        )
        assert check.returncode == 0, check.stderr


def test_tls_with_symlinked_certificate(
    powercap_tree: Path, tmp_path: Path, shared_certificate: tuple[Path, Path]
) -> None:
    """The certificate and key are symlinks into an archive directory, as certbot does."""
    cert_file, key_file = shared_certificate
    assert cert_file.is_symlink() and key_file.is_symlink()
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert_file}\n  key_file: {key_file}\n")
    args = exporter_args(powercap_tree, "--web.config.file", str(config))
    with servers.run_exporter(args, tmp_path) as exporter:
        url = f"https://{exporter.address}/metrics"
        context = ssl.create_default_context(cafile=str(cert_file))
        deadline = time.monotonic() + 10  # the first sample is taken in the background
        while True:
            body = urllib.request.urlopen(url, timeout=10, context=context).read()
            if b"geopm_up" in body or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert b'geopm_up{source="powercap"} 1.0' in body
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{exporter.address}/metrics", timeout=5).read()
