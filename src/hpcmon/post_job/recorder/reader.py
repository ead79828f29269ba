"""Pure-Python reader of Recorder trace directories (2.4 per-rank layout, 2.5 and 3.0 layouts).

Recorder stores each rank's calls as a Sequitur grammar over a table of unique call
signatures (CST) plus one pair of 32-bit time deltas per call. Decoding = expand the grammar
to the rank's sequence of signature ids and integrate the deltas in that same order.
The official 3.0 C reader loses its place in the delta stream after a repeated rule; here
the deltas are consumed strictly in expansion order, so every call keeps its own time.

Modules: reader.py (this entry: which layout) -> layouts.py (2.5/3.0 and 2.4 directories)
-> binary.py (files, zlib blocks, call-signature tables) and grammar.py (Sequitur grammar
-> call sequence -> per-rank arrays) -> the records of model.py.
Format facts: /work/shared/specs/recorder-format-notes.md (read from Recorder's sources).
"""

from __future__ import annotations

from pathlib import Path

from hpcmon.post_job.files import read_regular_file
from hpcmon.post_job.problems import SourceError
from hpcmon.post_job.recorder.layouts import read_layout_24, read_layout_25_30
from hpcmon.post_job.recorder.model import RecorderTrace


def read_recorder_trace(path: Path) -> RecorderTrace:
    """Read one trace directory. Raises SourceError only when nothing can be read;
    problems confined to one rank are listed in ``errors`` and that rank is left out."""
    path = Path(path)
    if not path.is_dir():
        raise SourceError(f"{path}: not a Recorder trace directory")
    version = _read_version(path)
    if version.startswith(("3.0.", "2.5.")) or version in ("3.0", "2.5"):
        trace = read_layout_25_30(path, version)
    elif version.startswith("2.4.") or version == "2.4":
        trace = read_layout_24(path, version)
    else:
        raise SourceError(
            f"{path}: Recorder version {version} is not supported (readable: 2.4, 2.5, 3.0)"
        )
    announced, read = trace.metadata.total_ranks, len(trace.ranks)
    if read < announced:  # first, so a cap on problem lines never drops the count
        trace.errors.insert(
            0,
            f"{path}: {announced - read:,} of the {announced:,} ranks recorder.mt announces "
            "could not be read (left out: no per-rank data)",
        )
    return trace


def _read_version(path: Path) -> str:
    version_file = path / "VERSION"
    if not version_file.is_file():
        if (path / "recorder.dat").exists():
            raise SourceError(
                f"{path}: single-file 'recorder.dat' trace (Recorder after 3.0) is not supported"
            )
        if list(path.glob("*.itf")):
            raise SourceError(f"{path}: '.itf' trace of Recorder 2.2 or older is not supported")
        if (path / "recorder.mt").is_file():
            raise SourceError(
                f"{path}: no VERSION file (multi-file layout of Recorder after 3.0?); not supported"
            )
        raise SourceError(f"{path}: no VERSION file, not a Recorder trace directory")
    raw = read_regular_file(version_file, 64).strip(b"\0 \n\r\t")
    try:
        version = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SourceError(f"{version_file}: VERSION is not ASCII text") from None
    parts = version.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise SourceError(f"{version_file}: unrecognised version string (not N.N or N.N.N)")
    return version
