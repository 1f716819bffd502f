"""The one percentile of the project: nearest rank, the definition trtexec's findPercentile computes
(docs/engines.md, "4. Benchmark")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

__all__ = ["median", "percentile"]


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The smallest value with at least ``p`` percent of the values at or below it (nearest rank: the
    ceil(p/100 * n)-th value, the first for p = 0), on an ascending sequence; NaN when it is empty. The rank is
    computed exactly, so p = 90 of 10 values is the 9th, not the 10th as float rounding would give."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not in [0, 100]")
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = math.ceil(Fraction(str(p)) * n / 100)
    return float(sorted_values[max(rank, 1) - 1])


def median(sorted_values: Sequence[float]) -> float:
    """The middle value of an ascending sequence, or the mean of the two middle ones; NaN when it is empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    m = n // 2
    return float(sorted_values[m]) if n % 2 else (sorted_values[m - 1] + sorted_values[m]) / 2.0
