"""Line-protocol encoding (post_job.points): hostile names and values read back from a real
InfluxDB 1.6.7 exactly as written (the one documented exception: a backslash ending a tag
value, which InfluxDB 1.x cannot store, reads back as U+29F5)."""

from __future__ import annotations

import itertools
import json
import re
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcmon.post_job.points import UNSTORABLE_BACKSLASH, Point, format_field
from tests import servers

HOSTILE = [
    "plain",
    "trailing\\",
    "two trailing\\\\",
    "\\",
    "with space",
    "comma,inside",
    "equals=inside",
    'double"quote',
    "single'quote",
    "back\\slash",
    "back\\,slash-comma",
    "back\\ slash-space",
    "back\\=slash-equals",
    "\\\\double",
    "ünïcödé ✓",
    "emoji 🚀",
    "tab\tinside",
    "line\nbreak",
    "carriage\rreturn",
    " leading space",
    "trailing space ",
    "=leading equals",
    ",leading comma",
    "#hash",
    "not utf-8 \udce9 name",  # a file name read with surrogateescape
    "half emoji \ud83d",  # a JSON escape of half a surrogate pair
]
# lone surrogates included: what UTF-8 cannot carry is written as U+FFFD
tag_text = st.text(
    alphabet=st.sampled_from([*"ab \\,=\"'#\t\nü✓", "\udce9", "\ud83d"])
    | st.characters(codec="utf-8"),
    min_size=1,
    max_size=12,
).filter(lambda s: "\x00" not in s)
_counter = itertools.count(1)


def no_surrogates(value: str) -> str:
    return re.sub("[\ud800-\udfff]", "\ufffd", value)


def stored_tag(value: str) -> str:
    """What InfluxDB keeps for a tag value we write (the encoder's documented contract)."""
    value = no_surrogates(value)
    value = value.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    kept = value.rstrip("\\")
    return kept + UNSTORABLE_BACKSLASH * (len(value) - len(kept))


def stored_measurement(value: str) -> str:
    """A measurement name also loses a backslash before a comma or space: written as U+29F5."""
    value = value.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return re.sub(r"\\+(?=[, ]|\Z)", lambda run: UNSTORABLE_BACKSLASH * len(run.group()), value)


def _write(server: servers.InfluxDB1, db: str, lines: list[str]) -> None:
    request = urllib.request.Request(
        f"{server.url}/write?db={db}&precision=ns",
        data=("\n".join(lines) + "\n").encode("utf-8"),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204


def _round_trip(server: servers.InfluxDB1, db: str, tags: list[str], texts: list[str]) -> None:
    base = next(_counter) * 1000
    points = [
        Point("lp", {"t": tag, "jobid": "x"}, {"s": text, "n": i}, base + i)
        for i, (tag, text) in enumerate(zip(tags, texts, strict=True))
    ]
    _write(server, db, [p.to_line() for p in points])
    rows = server.series(
        f"SELECT t, s, n FROM lp WHERE time >= {base} AND time < {base + len(points)}", db=db
    )[0]["values"]
    got = {row[3]: (row[1], row[2]) for row in rows}
    for i, (tag, text) in enumerate(zip(tags, texts, strict=True)):
        stored_text = no_surrogates(text).replace("\n", "\\n").replace("\r", "\\r")
        assert got[i] == (stored_tag(tag), stored_text), (
            tag,
            text,
        )


@pytest.fixture(scope="module")
def lp_db(influxdb1: servers.InfluxDB1) -> str:
    influxdb1.create_database("lineprotocol")
    return "lineprotocol"


def test_hostile_tag_and_string_values_read_back_exactly(
    influxdb1: servers.InfluxDB1, lp_db: str
) -> None:
    _round_trip(influxdb1, lp_db, HOSTILE, list(reversed(HOSTILE)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(tag_text, tag_text), min_size=1, max_size=15))
def test_any_tag_and_string_value_reads_back(
    influxdb1: servers.InfluxDB1, lp_db: str, pairs: list[tuple[str, str]]
) -> None:
    _round_trip(influxdb1, lp_db, [t for t, _ in pairs], [s for _, s in pairs])


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**63), 2**63 - 1))
def test_numbers_round_trip_and_never_negative_zero(value: float | int) -> None:
    text = format_field(value)
    assert text is not None and text not in ("-0", "-0i")
    if isinstance(value, int):
        assert text == f"{value}i"
    else:
        assert float(text) == value and text != "-0"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_fields_are_dropped(value: float) -> None:
    assert Point("m", {}, {"v": value, "w": 1}, 5).to_line() == "m w=1i 5"
    assert Point("m", {}, {"v": value}, 5).to_line() == ""


def test_negative_zero_is_zero() -> None:
    assert Point("m", {}, {"v": -0.0}, 1).to_line() == "m v=0 1"


def test_same_point_same_line_whatever_the_key_order() -> None:
    a = Point("m", {"b": "2", "a": "1"}, {"y": 1.5, "x": "s"}, 3)
    b = Point("m", {"a": "1", "b": "2"}, {"x": "s", "y": 1.5}, 3)
    assert a.to_line() == b.to_line() == 'm,a=1,b=2 x="s",y=1.5 3'


def test_lines_parse_as_json_free_text() -> None:
    # no raw line break can ever reach the output, whatever the input
    line = Point("m\n", {"t\n": "v\r\n"}, {"f\n": "a\nb"}, 1).to_line()
    assert "\n" not in line and "\r" not in line
    json.dumps(line)


key_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
                   max_size=10)  # fmt: skip
field_value = (
    st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.text(max_size=20)
)


@settings(max_examples=300, deadline=None)
@given(
    measurement=key_text,
    tags=st.dictionaries(key_text, key_text, max_size=4),
    fields=st.dictionaries(key_text, field_value, min_size=1, max_size=5),
    stamp=st.integers(0, 2**62),
)
def test_points_parse_back_to_what_was_written(measurement, tags, fields, stamp) -> None:
    """Any point: its line parses (by InfluxDB 1.x's rules) into the same measurement, tags,
    fields and time, up to the documented transformations."""
    from tests.post_job.lineprotocol_parse import parse_line

    line = Point(measurement, tags, fields, stamp).to_line()
    assert "\n" not in line and "\r" not in line
    got_measurement, got_tags, got_fields, got_time = parse_line(line)

    def name(text: str) -> str:
        return stored_tag(text)

    assert got_measurement == stored_measurement(measurement)
    assert got_tags == {name(k): name(v) for k, v in tags.items()}
    want = {}
    for key, value in fields.items():
        if isinstance(value, str):
            value = value.replace("\n", "\\n").replace("\r", "\\r")
        elif isinstance(value, float) and value == 0:
            value = 0.0
        want[name(key)] = value
    assert got_fields == want
    assert got_time == stamp


def test_hostile_measurement_names_read_back(influxdb1: servers.InfluxDB1, lp_db: str) -> None:
    """InfluxDB 1.x drops a backslash before a comma or space in a measurement name: the
    encoder writes U+29F5 there, and the stored name is the documented one."""
    names = ["m\\ 0", "m\\,x", "tail\\", "mid\\dle", "plain m", "a,b"]
    base = next(_counter) * 1000
    lines = [Point(n, {"jobid": "mx"}, {"f": i}, base + i).to_line() for i, n in enumerate(names)]
    _write(influxdb1, lp_db, lines)
    stored = {row[0] for row in influxdb1.series("SHOW MEASUREMENTS", db=lp_db)[0]["values"]}
    assert {stored_measurement(n) for n in names} <= stored
