"""Exposition text: small families through prometheus-client's own writer, and big ones kept
compressed once per sample so that every scrape, gzip or not, only copies bytes."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

KEEP_RAW_BYTES = 64 << 20  # above this only the compressed form is kept (memory)
GZIP_LEVEL = 6  # small parts, compressed per scrape
SAMPLE_GZIP_LEVEL = 1  # a sample, once: 4x faster than 6 on 400 MB of text, 8% bigger


class _Families:
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render_families(families: Iterable[Metric]) -> bytes:
    """Text format 0.0.4 for ready-made families (escaping done by prometheus-client)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


@dataclass(frozen=True, slots=True)
class Compressed:
    """An exposition compressed once: a raw deflate stream ending in a sync flush (so more
    deflate data can follow it in the same gzip member), its CRC-32 and length. The text
    itself is kept too unless it is big; then ``chunks()`` inflates it piece by piece."""

    deflated: bytes
    crc: int
    length: int
    raw: bytes | None

    @classmethod
    def of(cls, raw: bytes, keep_raw_bytes: int = KEEP_RAW_BYTES) -> Compressed:
        compressor = zlib.compressobj(SAMPLE_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        deflated = compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH)
        keep = raw if len(raw) <= keep_raw_bytes else None
        return cls(deflated, zlib.crc32(raw), len(raw), keep)

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The text, in pieces of about ``size`` bytes."""
        if self.raw is not None:
            yield self.raw
            return
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        for start in range(0, len(self.deflated), size // 16):
            data = inflater.decompress(self.deflated[start : start + size // 16])
            if data:
                yield data
        rest = inflater.flush()
        if rest:
            yield rest


Part = bytes | Compressed
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, OS unknown


def plain_length(parts: Iterable[Part]) -> int:
    return sum(part.length if isinstance(part, Compressed) else len(part) for part in parts)


def plain_chunks(parts: Iterable[Part]) -> Iterator[bytes]:
    for part in parts:
        if isinstance(part, Compressed):
            yield from part.chunks()
        else:
            yield part


def gzip_parts(parts: list[Part]) -> list[bytes]:
    """One gzip member (RFC 1952) of all ``parts``, reusing each Compressed part's deflate data.

    The CRC of the whole text is computed by continuing from the first part's: a Compressed
    part therefore goes first (order does not matter in the text format); any other
    Compressed part is read back for its CRC."""
    parts = sorted(parts, key=lambda part: not isinstance(part, Compressed))
    out = [_GZIP_HEADER]
    crc, length = 0, 0
    compressor = None
    for number, part in enumerate(parts):
        if isinstance(part, Compressed):
            if compressor is not None:
                out.append(compressor.flush(zlib.Z_SYNC_FLUSH))
                compressor = None
            out.append(part.deflated)
            if number == 0:
                crc = part.crc
            else:
                for chunk in part.chunks():
                    crc = zlib.crc32(chunk, crc)
            length += part.length
            continue
        if compressor is None:
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        out.append(compressor.compress(part))
        crc = zlib.crc32(part, crc)
        length += len(part)
    if compressor is None:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    out.append(compressor.flush(zlib.Z_FINISH))  # the final block
    out.append(crc.to_bytes(4, "little") + (length & 0xFFFFFFFF).to_bytes(4, "little"))
    return [chunk for chunk in out if chunk]
