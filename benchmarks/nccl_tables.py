"""Read NCCL's tuning tables (src/graph/tuning.cc) out of a libnccl.so.2 binary.

Run from the repository root:
    python benchmarks/nccl_tables.py path/to/nvidia_nccl_cu13-2.30.7-...whl  (or libnccl.so.2)
tuning.cc's static tables lie in order in .rodata: treeCorrectionFactor (float[3][24]),
then baseLat (double[7][3]), hwLat (double[3][7][3]), llMaxBws, the per-channel caps. The
script finds baseLat by its 2.30.7 values (tree 6.8/14/8.4, ring 6.6/14/8.4, as
../shared/reference/nccl.yaml transcribes them from the source), checks that hwLat follows
as the reference has it, and prints the float table before it: treeCorrectionFactor, the
values simtrain.comm.backends uses.
"""

import struct
import sys
import zipfile

BASE_LAT = (6.8, 14.0, 8.4, 6.6, 14.0, 8.4)
HW_NVLINK_TREE_RING = (0.6, 1.25, 4.0, 0.6, 1.9, 3.4)
PROTOCOLS = ("LL", "LL128", "Simple")


def library(path: str) -> bytes:
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as whl:
            name = next(n for n in whl.namelist() if n.endswith("libnccl.so.2"))
            return whl.read(name)
    with open(path, "rb") as f:
        return f.read()


def main() -> None:
    data = library(sys.argv[1])
    base = data.find(struct.pack("<6d", *BASE_LAT))
    if base < 0:
        raise SystemExit("baseLat (6.8, 14, 8.4 / 6.6, 14, 8.4) not found: not NCCL 2.30.x?")
    hw = base + 21 * 8  # baseLat is double[7 algorithms][3 protocols]
    if struct.unpack("<6d", data[hw:hw + 48]) != HW_NVLINK_TREE_RING:
        raise SystemExit("hwLat[NVLINK] does not follow baseLat as the reference has it")
    table = struct.unpack("<72f", data[base - 288:base])
    print(f"baseLat at .rodata offset {base}; hwLat[NVLINK] tree/ring follow it")
    for k, proto in enumerate(PROTOCOLS):
        row = ", ".join(f"{x:.2g}" for x in table[24 * k:24 * (k + 1)])
        print(f"treeCorrectionFactor[{proto}] = ({row})")


if __name__ == "__main__":
    main()
