"""Human units at the edges, SI inside: parse "25MiB", "400Gbps", "2us", "989TFLOPS" once.

Everything inside simtrain is in seconds, bytes, bytes/s, FLOP and FLOP/s. Scenario fields
use the annotated types below (``Bytes``, ``Bandwidth``, ``Seconds``, ``FlopRate``) so that
conversion happens exactly once, when the scenario is validated.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

_DECIMAL = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
           "Pi": 2.0**50, "Ei": 2.0**60}
# Every prefix the patterns accept has a factor (binary first: "Ki" before "K").
_PREFIX = "(?P<prefix>" + "|".join([*_BINARY, *_DECIMAL]) + ")"

# Durations inside one simulated training step (latencies, launch overheads, straggler
# delays, hang times): a step of a day is far beyond any real one (minutes at most), and
# capping here keeps a typo such as "1e400s" or "1e300" from reaching the engine as a
# time it would take forever to simulate.
MAX_SECONDS = 86_400.0
# The slowest link simtrain accepts: 1 B/s. Slower ones are not links, and a subnormal
# bandwidth such as 5e-324 B/s made 1 / bandwidth overflow (a ZeroDivisionError).
MIN_BANDWIDTH = 1.0

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_SIZE_RE = re.compile(_NUMBER + r"\s*" + _PREFIX + r"?(?P<unit>B|b|bit|bits|byte|bytes)?$")
_RATE_RE = re.compile(
    _NUMBER + r"\s*" + _PREFIX + r"?(?P<unit>bps|Bps|b/s|B/s|bit/s|byte/s|bytes/s)$"
)
_TIME_RE = re.compile(_NUMBER + r"\s*(?P<unit>ns|us|µs|ms|s|sec|min|h)?$")
_FLOPS_RE = re.compile(_NUMBER + r"\s*(?P<prefix>[kKMGTPE])?(?P<unit>FLOPS|FLOP/s|flops|flop/s)?$")

_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0,
         "h": 3600.0}


def _prefix_factor(prefix: str | None) -> float:
    if not prefix:
        return 1.0
    return _BINARY[prefix] if prefix in _BINARY else _DECIMAL[prefix]


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def parse_bytes(value: object) -> float:
    """Bytes from a number (already bytes) or a string like "25MB", "25MiB", "80GiB", "8G".

    Decimal prefixes are powers of 1000, binary ("Ki", "Mi", "Gi") powers of 1024; a
    lowercase "b"/"bit" means bits (divided by 8).
    """
    number = _as_number(value)
    if number is not None:
        return _non_negative(number, value)
    match = _SIZE_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"expected a size such as 25MB, 25MiB or 80GiB, got {value!r}")
    factor = _prefix_factor(match["prefix"])
    if match["unit"] in ("b", "bit", "bits"):
        factor /= 8.0
    return _non_negative(float(match["num"]) * factor, value)


def parse_bandwidth(value: object) -> float:
    """Bytes per second from a number (already B/s) or "400Gbps", "50GB/s", "25 GBps".

    "b" is bits and "B" is bytes, as on datasheets: 400Gbps = 50e9 B/s.
    """
    number = _as_number(value)
    if number is not None:
        return _at_least_one_byte_per_s(_positive(number, value), value)
    match = _RATE_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"expected a bandwidth such as 400Gbps or 50GB/s, got {value!r}")
    factor = _prefix_factor(match["prefix"])
    if match["unit"] in ("bps", "b/s", "bit/s"):
        factor /= 8.0
    return _at_least_one_byte_per_s(_positive(float(match["num"]) * factor, value), value)


def parse_seconds(value: object) -> float:
    """Seconds from a number (already seconds) or "2us", "1.5 ms", "10ns"; 0..MAX_SECONDS."""
    number = _as_number(value)
    if number is None:
        match = _TIME_RE.match(str(value).strip())
        if not match:
            raise ValueError(f"expected a duration such as 2us, 1.5ms or 10ns, got {value!r}")
        number = float(match["num"]) * _TIME[match["unit"] or "s"]
    seconds = _non_negative(number, value)
    if seconds > MAX_SECONDS:
        raise ValueError(f"a duration within one training step must be at most "
                         f"{MAX_SECONDS:,.0f} s (one day), got {value!r}")
    return seconds


def parse_flop_rate(value: object) -> float:
    """FLOP/s from a number (already FLOP/s) or "989TFLOPS", "312 TFLOP/s"."""
    number = _as_number(value)
    if number is not None:
        return _positive(number, value)
    match = _FLOPS_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"expected a FLOP rate such as 989TFLOPS, got {value!r}")
    return _positive(float(match["num"]) * _prefix_factor(match["prefix"]), value)


def parse_mebibytes(value: object) -> float:
    """Bytes from a PyTorch-style MiB count or a size string.

    A bare number means MiB whether YAML reads it as a number or a string: ``25``, ``"25"``
    and ``"25MiB"`` are all 25 MiB (``bucket_cap_mb`` as in PyTorch); ``"25MB"`` is 25e6
    bytes, as any size string.
    """
    number = _as_number(value)
    if number is None and isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
        number = float(value.strip())
    if number is not None:
        return _positive(_finite(number, value) * 2.0**20, value)
    return _positive(parse_bytes(value), value)


def _at_least_one_byte_per_s(rate: float, original: object) -> float:
    if rate < MIN_BANDWIDTH:
        raise ValueError(f"a link moves at least {MIN_BANDWIDTH:g} B/s, got {original!r}")
    return rate


def _finite(number: float, original: object) -> float:
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {original!r}")
    return number


def _non_negative(number: float, original: object) -> float:
    if _finite(number, original) < 0:
        raise ValueError(f"must not be negative, got {original!r}")
    return number


def _positive(number: float, original: object) -> float:
    if _finite(number, original) <= 0:
        raise ValueError(f"must be positive, got {original!r}")
    return number


Bytes = Annotated[float, BeforeValidator(parse_bytes)]
Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth)]
Seconds = Annotated[float, BeforeValidator(parse_seconds)]
FlopRate = Annotated[float, BeforeValidator(parse_flop_rate)]
MiBCount = Annotated[float, BeforeValidator(parse_mebibytes)]


def fmt_bytes(n: float) -> str:
    """Human bytes with binary prefixes, for reports: 26214400 -> '25.0 MiB'."""
    for unit, size in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(t: float) -> str:
    """Human duration for reports: 0.0012 -> '1.20 ms'."""
    if t >= 1.0:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    if t >= 1e-6:
        return f"{t * 1e6:.2f} us"
    return f"{t * 1e9:.0f} ns"


def fmt_bandwidth(bw: float) -> str:
    """Human bandwidth in decimal GB/s as datasheets print it."""
    return f"{bw / 1e9:.1f} GB/s"
