"""Grafana file provisioning: the datasources (fixed uids, as the dashboards expect) and a
dashboards provider for the generated JSON folder."""

from __future__ import annotations

from typing import Any

from .config import Config


def datasources(config: Config) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "hpcmon Prometheus",
                "type": "prometheus",
                "uid": config.prometheus_datasource_uid,
                "access": "proxy",
                "url": config.prometheus_url,
                "jsonData": {"httpMethod": "POST", "timeInterval": "15s"},
                "editable": False,
            },
            {
                "name": "hpcmon InfluxDB",
                "type": "influxdb",
                "uid": config.influxdb_datasource_uid,
                "access": "proxy",
                "url": config.influxdb_url,
                "jsonData": {"dbName": config.influxdb_database, "httpMode": "GET"},
                "editable": False,
            },
        ],
    }


def dashboard_providers(config: Config) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "hpcmon",
                "folder": "hpcmon",
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": config.dashboards_path, "foldersFromFilesStructure": False},
            }
        ],
    }
