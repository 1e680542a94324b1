"""Which text encoding a file's bytes are in, and whether that is a guess.

Valid UTF-8 is UTF-8, always: no detector is asked about it, so UTF-8 text
is never decoded as something else.  For the rest, a statistical detector
(``charset-normalizer``) is right when it recognises a language in enough
text, and wrong in a telling way on short samples: "Café" comes back as
``cp1006`` (Urdu) because every single-byte code page decodes five bytes
without complaint.  So:

1. A byte-order mark decides; a NUL byte in the first 8 KiB means binary.
2. Valid UTF-8 is UTF-8.
3. The detector's answer stands when it recognised a language (coherence
   at least :data:`CONFIDENT_COHERENCE`).  When Windows-1252 decodes the
   bytes to the same text, it is named instead: the same characters under
   the name a Western project expects.
4. Otherwise, bytes that read as Western text (no control characters, and
   the non-ASCII bytes mostly alone between ASCII ones, as accented
   letters are, where Cyrillic words and CJK characters come in runs) are
   Windows-1252, or Latin-1 when they use a byte Windows-1252 leaves
   undefined, flagged as guessed.
5. Otherwise the detector's best answer, flagged as guessed; and when it
   has none, the file is binary.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

SNIFF_BYTES = 8192
# What the detector is shown: enough for it to recognise a language,
# little enough to keep a read of a legacy file quick.
DETECT_BYTES = 65536
# charset-normalizer's coherence is 0 when it recognised no language in the
# text; Greek prose of 200 bytes scores 0.19, Japanese of 135 bytes 0.11.
CONFIDENT_COHERENCE = 0.1
# Mean length of the runs of non-ASCII bytes that still reads as Western
# text: "Größe", "crème" have runs of 1, "informações" one of 2; a Cyrillic
# word or two CJK characters make 4 and more.
WESTERN_MEAN_RUN = 1.5
# How close to the detector's best answer another decoding must come to
# count as a tie (charset-normalizer's chaos and coherence, 0 to 1).
TIE_CHAOS = 0.01
TIE_COHERENCE = 0.05

_WESTERN = ("cp1252", "latin_1", "iso8859_15")
_SHOWN = {"latin_1": "latin-1"}
_CP1252_UNDEFINED = frozenset(b"\x81\x8d\x8f\x90\x9d")
# C0 controls that text files do hold: tab, newline, vertical tab, form
# feed, carriage return, escape (terminal colours in logs).
_TEXT_CONTROLS = frozenset(b"\t\n\x0b\x0c\r\x1b")
_C0 = frozenset(range(32)) - _TEXT_CONTROLS

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class Detected(NamedTuple):
    encoding: str
    guessed: bool  # no evidence beyond "these bytes decode": the caller says so


def detect(data: bytes, *, complete: bool = False) -> Detected | None:
    """The encoding of ``data`` (a file's first bytes, or all of it), or None for binary.

    ``complete`` says ``data`` is the whole file: a multi-byte character cut
    at its end is then invalid UTF-8 rather than the edge of a sample.
    """
    for bom, name in _BOMS:
        if data.startswith(bom):
            return Detected(name, False)
    if b"\x00" in data[:SNIFF_BYTES]:
        return None
    bad = first_invalid_utf8(data, complete=complete)
    if bad is None:
        return Detected("utf-8", False)
    # The detector sees the text around the first byte that is not UTF-8:
    # a file that is ASCII for its first 64 KiB is judged by what follows.
    start = max(0, min(bad - DETECT_BYTES // 2, len(data) - DETECT_BYTES))
    return _legacy(data[start : start + DETECT_BYTES])


def first_invalid_utf8(data: bytes, *, complete: bool) -> int | None:
    """The offset of the first byte that is not UTF-8, or None when all of it is."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def _legacy(sample: bytes) -> Detected | None:
    import charset_normalizer  # only for the rare file that is not UTF-8: keeps start-up fast

    matches = [m for m in charset_normalizer.from_bytes(sample) if m.encoding]
    best = matches[0] if matches else None
    if best is not None and best.coherence >= CONFIDENT_COHERENCE:
        # Decodings about as good as the best (each stands for all the code
        # pages that give the same text): a tie is not a detection.
        tied = [
            m
            for m in matches
            if m.chaos <= best.chaos + TIE_CHAOS and m.coherence >= best.coherence - TIE_COHERENCE
        ]
        for match in tied:
            names = {str(match.encoding), *(str(n) for n in match.could_be_from_charset)}
            for name in _WESTERN:
                if name in names:
                    return Detected(_SHOWN.get(name, name), match is not best)
        return Detected(str(best.encoding), len(tied) > 1)
    if _plain_text(sample):
        western = western_encoding(sample)
        if western is not None:
            return Detected(western, True)
    if best is not None:
        return Detected(str(best.encoding), True)
    if _plain_text(sample):
        # Text no detector places (short Turkish, Polish...): shown, flagged,
        # rather than handed over as base64.
        return Detected(_cp1252_or_latin1(sample), True)
    return None


def _plain_text(sample: bytes) -> bool:
    """No control characters a text file would not hold."""
    return not any(byte in _C0 or byte == 0x7F for byte in sample)


def western_encoding(sample: bytes) -> str | None:
    """``cp1252`` or ``latin-1`` when the non-ASCII bytes of ``sample`` sit as
    accented letters do in Western text, mostly alone; else None."""
    runs = 0
    high = 0
    previous_high = False
    for byte in sample:
        if byte >= 0x80:
            high += 1
            runs += not previous_high
        previous_high = byte >= 0x80
    if high == 0 or high / runs > WESTERN_MEAN_RUN:
        return None
    return _cp1252_or_latin1(sample)


def _cp1252_or_latin1(sample: bytes) -> str:
    # cp1252 decodes 0x80-0x9f as quotes, dashes and the euro sign, but
    # leaves five bytes undefined; Latin-1 decodes everything.
    return "cp1252" if _CP1252_UNDEFINED.isdisjoint(sample) else "latin-1"
