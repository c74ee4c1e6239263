"""Markdown tables of a `simtrain validate --json` run, for docs/validation.md.

Usage: simtrain validate --json > v.json; python benchmarks/validation_table.py v.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    parser.add_argument("--worst", type=int, default=15, help="worst compared rows to list")
    data = json.loads(parser.parse_args().json.read_text())
    args = parser.parse_args()
    print("| suite | metric | rows | expressible | MAPE | mean signed error | worst row |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for s in data["summary"]:
        mape = "—" if s["mape"] is None else f"{s['mape']:.1%}"
        worst = "—" if s["worst"] is None else f"{s['worst']} ({pct(s['worst_error'])})"
        print(f"| {s['suite']} | {s['metric']} | {s['total']} | {s['rows']} | {mape} | "
              f"{pct(s['mean_error'])} | {worst} |")
    compared = [r for r in data["rows"] if r["error"] is not None and r["suite"] != "nccl"]
    compared.sort(key=lambda r: -abs(r["error"]))
    print()
    print("| suite | row | metric | published | predicted | error | note |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for r in compared[: args.worst]:
        print(f"| {r['suite']} | {r['id']} | {r['metric']} | {r['published']:,.1f} | "
              f"{r['predicted']:,.1f} | {pct(r['error'])} | {r['note']} |")


if __name__ == "__main__":
    main()
