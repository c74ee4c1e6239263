"""Predicted vs published NCCL bus bandwidth (simtrain.comm.reference), as a table.

Usage: python benchmarks/nccl_calibration.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simtrain.comm.reference import calibration_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = calibration_table()
    print(f"{'system':<58}{'published':>10}{'simtrain':>10}{'error':>8}  algorithm")
    for r in rows:
        if r["predicted_gbps"] is None:
            print(f"{r['system']:<58}{r['published_gbps']:>10.1f}{'—':>10}{'':>8}  "
                  f"not modelled: {r['skipped']}")
        else:
            print(f"{r['system']:<58}{r['published_gbps']:>10.1f}{r['predicted_gbps']:>10.1f}"
                  f"{r['error']:>+8.1%}  {r['algorithm']}/{r['protocol']}"
                  + (f"  (known miss: {r['known_miss']})" if r["known_miss"] else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
