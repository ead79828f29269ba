"""Agreement of hpcmon-report's diagnosis with Drishti on a directory of Darshan logs.

For every log: Drishti (drishti-io, ``drishti --csv``) and the report's rules on the same log
(``--darshan`` path: every record, raw counters). Counted: the (log, code) pairs Drishti raises
for the codes the report covers (all at Drishti's high or warn level), how many of them the
report raises too, and the pairs only the report raises. Writes a Markdown table.

    .venv/bin/python -m devtools.drishti_agreement LOG_DIR [--out docs/drishti-agreement.md]
        [--sources "where the logs come from (repositories, commits, licences)"]

The page says when and with which versions it was measured (every figure on the documentation
site names what produced it and when).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpcmon.report.darshan_log import darshan_from_logs  # noqa: E402
from hpcmon.report.insights import diagnose  # noqa: E402
from hpcmon.report.model import JobData  # noqa: E402
from tests.report.report_drishti import COVERED, drishti_codes  # noqa: E402


def ours(log: Path) -> set[str] | None:
    data, _ = darshan_from_logs([log])
    if data is None:
        return None
    return {i.drishti for i in diagnose(JobData("1", darshan=data))[0] if i.drishti}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("logs", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "drishti-agreement.md")
    parser.add_argument("--sources", default="", help="where the logs come from (a paragraph)")
    args = parser.parse_args()
    lines, total, agreed, extra, skipped = [], 0, 0, 0, []
    for log in sorted(args.logs.glob("*.darshan")):
        with tempfile.TemporaryDirectory() as directory:
            theirs = drishti_codes(log, Path(directory))
        mine = ours(log)
        if theirs is None or mine is None:
            skipped.append(log.name)
            continue
        total += len(theirs)
        agreed += len(theirs & mine)
        extra += len(mine - theirs)
        lines.append(
            f"| {log.name} | {' '.join(sorted(theirs)) or '-'} | {' '.join(sorted(mine)) or '-'} |"
        )
    share = agreed / total if total else 1.0
    measured = (
        f"Measured {datetime.date.today().isoformat()} with drishti-io {version('drishti-io')}"
        f" and PyDarshan {version('darshan')} by `python -m devtools.drishti_agreement` on"
        f" {args.sources or 'the logs under ' + args.logs.name}"
    ).rstrip(".") + "."
    text = [
        "# Diagnosis agreement with Drishti",
        "",
        measured,
        "",
        f"Logs: {len(lines)} (every `.darshan` under the directory given; {len(skipped)} that"
        " Drishti or the reader could not open are left out). Codes: the Drishti triggers the"
        f" report covers ({', '.join(sorted(COVERED))}).",
        "",
        f"**{agreed} of the {total} (log, code) pairs Drishti raises are raised by the report"
        f" ({share:.1%}); the report raises {extra} pair(s) Drishti does not.**",
        "",
        "| log | Drishti | hpcmon-report |",
        "|---|---|---|",
        *lines,
    ]
    if skipped:
        text += ["", "Left out: " + ", ".join(skipped)]
    args.out.write_text("\n".join(text) + "\n")
    print(f"{agreed}/{total} pairs ({share:.1%}), {extra} extra; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
