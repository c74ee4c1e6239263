"""Per-series and per-size busbw error of the nccl-modern suite, as markdown tables.

Run from the repository root: python benchmarks/nccl_modern_report.py [--min-bytes N]
The current per-series and per-size state (docs/collectives.md compares rounds from
`simtrain validate -s nccl-modern --json`), and the series ranked by what they add to the
suite's MAPE and mean signed error (a series' share is the sum of its points' |error|,
resp. error, over every compared point of the suite, so the shares add up to the suite's
MAPE and mean).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from simtrain.comm.validation import suite_rows


def _mape(errors: list[float]) -> str:
    return f"{sum(abs(e) for e in errors) / len(errors):.1%}" if errors else "—"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def contributions(per_series: dict[str, list[tuple[int, float]]]
                  ) -> list[tuple[str, int, float, float]]:
    """(series, points, share of the suite's MAPE, share of its mean signed error), largest
    |share of MAPE| first; the shares sum to the suite's MAPE and mean signed error."""
    total = sum(len(points) for points in per_series.values())
    out = [(sid, len(points), sum(abs(e) for _, e in points) / total,
            sum(e for _, e in points) / total) for sid, points in per_series.items()]
    return sorted(out, key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--min-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    rows = suite_rows()
    per_series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    skipped: dict[str, str] = {}
    for r in rows:
        sid, _, nbytes = r.id.rpartition("@")
        if r.error is None:
            skipped.setdefault(sid, r.skipped)
            continue
        per_series[sid].append((int(nbytes), r.error))
    print(f"| series | points >= {_size(args.min_bytes)} | MAPE | worst | mean signed |")
    print("| --- | --- | --- | --- | --- |")
    big: list[float] = []
    for sid, points in per_series.items():
        errs = [e for n, e in points if n >= args.min_bytes]
        big += errs
        if errs:
            worst = max(errs, key=abs)
            print(f"| {sid} | {len(errs)} | {_mape(errs)} | {worst:+.1%} | "
                  f"{sum(errs) / len(errs):+.1%} |")
    for sid, why in skipped.items():
        print(f"| {sid} | — | {why} | | |")
    over = sum(1 for e in big if abs(e) > 0.15)
    print(f"\nAll points >= {_size(args.min_bytes)}: {len(big)}, MAPE {_mape(big)}, "
          f"mean {sum(big) / len(big):+.1%}, worse than 15%: {over}")
    every = [e for pts in per_series.values() for _, e in pts]
    print(f"All points: {len(every)}, MAPE {_mape(every)}\n")
    print("| series | points | share of MAPE | share of mean signed |")
    print("| --- | --- | --- | --- |")
    for sid, n, mape, mean in contributions(per_series):
        print(f"| {sid} | {n} | {mape:.2%} | {mean:+.2%} |")
    print()
    by_size: dict[int, list[float]] = defaultdict(list)
    for points in per_series.values():
        for n, e in points:
            by_size[n].append(e)
    print("| size | points | MAPE | worst series error |")
    print("| --- | --- | --- | --- |")
    for n in sorted(by_size):
        errs = by_size[n]
        print(f"| {_size(n)} | {len(errs)} | {_mape(errs)} | {max(errs, key=abs):+.1%} |")


if __name__ == "__main__":
    main()
