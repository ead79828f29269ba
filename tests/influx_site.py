"""The documented InfluxDB deployment for a site (docs/site-scale.md, "InfluxDB for a site"), as
the tests create it: the page's own statement, read from the page, with a duration that keeps
the bundled jobs
(2016-2025), then a short default policy in front of it, so that a hook or report that did not
go through --influx.retention-policy would lose or miss every bundled job."""

from __future__ import annotations

import re
from pathlib import Path

from tests.servers import InfluxDB1

SITE_PAGE = Path(__file__).resolve().parent.parent / "docs" / "site-scale.md"
POLICY = "jobs"
TRAP = "recent"  # the database's default policy in the tests: keeps one hour


def documented_statement() -> str:
    """The CREATE DATABASE statement of the documented site deployment."""
    text = SITE_PAGE.read_text()
    [statement] = re.findall(r"^\s*(CREATE DATABASE hpcmon WITH .*)$", text, re.M)
    return statement.strip()


def create_site_database(server: InfluxDB1, database: str, duration: str = "INF") -> None:
    """``database`` as the site page creates ``hpcmon`` (its policy ``jobs`` keeping ``duration``),
    then TRAP made the default policy."""
    statement = documented_statement()
    assert f'NAME "{POLICY}"' in statement, statement
    statement = statement.replace("CREATE DATABASE hpcmon ", f'CREATE DATABASE "{database}" ', 1)
    statement = re.sub(r"WITH DURATION \S+", f"WITH DURATION {duration}", statement, count=1)
    trap = f'CREATE RETENTION POLICY "{TRAP}" ON "{database}" DURATION 1h REPLICATION 1 DEFAULT'
    for query in (statement, trap):
        answer = server.query(query)["results"][0]
        assert "error" not in answer, (query, answer)
