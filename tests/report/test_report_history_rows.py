"""The history from hostile app_run rows: whatever InfluxDB hands back, the section is valid
JSON of the schema, and the regression rule holds on the numbers it kept."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcmon.report.history import AppHistory, history_json, regressions, run_from_row

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "src" / "hpcmon" / "report" / "schema.json").read_text()
)
FIELDS = ("runtime", "bytes_read", "bytes_written", "reads", "writes", "metadata_time_share",
          "energy_joules", "start_time", "time")  # fmt: skip
values = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0, max_value=1e12),
)
rows = st.dictionaries(st.sampled_from(FIELDS), values).map(lambda r: {"jobid": "7", **r})


@given(rows, st.lists(rows, max_size=6))
def test_any_rows_give_a_valid_history(current: dict, earlier: list[dict]) -> None:
    history = AppHistory(
        "app", None, "user", run_from_row(current), [run_from_row(r) for r in earlier]
    )
    section = history_json(history)
    document = json.loads(json.dumps(section, allow_nan=False))
    jsonschema.validate(document, SCHEMA["properties"]["history"] | {"$defs": SCHEMA["$defs"]})


@given(
    st.floats(min_value=0, max_value=1e15),
    st.lists(st.floats(min_value=0, max_value=1e15), max_size=6),
)
def test_flag_rule(current: float, before: list[float]) -> None:
    def run(value: float) -> dict:
        return {"jobid": "1", "bytes_written": value, "start_time": 1.0}

    history = AppHistory(
        "a", "u", "user", run_from_row(run(current)), [run_from_row(run(v)) for v in before]
    )
    [item] = [i for i in regressions(history) if i["figure"] == "bytes_written"]
    assert item["earlier_runs"] == len(before)
    if len(before) < 2:
        assert not item["flagged"]
        return
    median = statistics.median(before)
    assert item["median"] == median
    if median > 0:
        ratio = current / median
        assert item["flagged"] == (ratio >= 2 or ratio <= 0.5)
    else:
        assert item["flagged"] == (current > 0)


def test_history_flags_are_checked(capsys) -> None:
    from hpcmon.report import cli

    assert cli.main(["--job-id", "1", "--history.runs", "-1"]) == 2
    assert "--history.runs must be 0 to 1000" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--job-id", "1", "--history.scope", "team"])
    assert stopped.value.code == 2
    assert "invalid choice: 'team'" in capsys.readouterr().err
