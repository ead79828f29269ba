"""Real-server helpers for tests; implemented in devtools.servers (the demo uses them too)."""

from devtools.servers import *  # noqa: F401,F403
from devtools.servers import (  # noqa: F401
    InfluxDB1,
    Prometheus,
    Server,
    VictoriaMetrics,
    free_port,
    http_get,
    run_influxdb1,
    run_prometheus,
    run_victoria_metrics,
    stop_process,
    wait_http,
)
