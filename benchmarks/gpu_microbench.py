"""Measure GEMM, attention and memory-bound kernels on this GPU; write an efficiency table.

    python benchmarks/gpu_microbench.py --out h100.ops.yaml [--dtype bf16] [--quick]

Needs torch with CUDA and a GPU; never part of the tests. The table (simtrain.workload.
tables format) goes into a scenario as ``compute: {tables: [h100.ops.yaml]}``. Sizes
follow simtrain's op conventions so rows match what the simulator asks for:

- gemm (m, n, k): ``x[m, k] @ w[k, n]``, swept along m (tokens: 512 .. 65536) for the
  (n, k) pairs of transformer layers (h, 3h, 4h, ffn) of a few hidden sizes, and along
  k and n around them, so the table can interpolate in each dimension;
- attention: ``scaled_dot_product_attention(q, k, v, is_causal=True)`` forward and
  backward on [b, heads, s, d]; flops recorded as ``Op.flops`` counts them (4·b·s²·heads·d,
  non-causal; backward 2.5x), the measured time being the causal kernel's;
- elementwise (add, gelu), norm (layer_norm), softmax: bytes of inputs plus output.

Times are CUDA-event medians over ``--iters`` runs after ``--warmup`` runs, with the L2
cache flushed between runs (a 256 MiB write) so that repeated inputs are not cache hits.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

from simtrain.ingest.classify import gpu_from_device_name
from simtrain.workload.tables import Row, write_table

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def timer(torch: object, warmup: int, iters: int) -> Callable[[Callable[[], object]], float]:
    """A function timing a callable on the GPU: median seconds over ``iters`` runs."""
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")

    def run(fn: Callable[[], object]) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iters):
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        return statistics.median(times)

    return run


def gemm_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """Lines along m for transformer (n, k) pairs, plus k and n lines through m = 8192."""
    hidden = (2048, 4096) if quick else (2048, 4096, 8192, 12288)
    ms = (512, 2048, 8192) if quick else (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
    shapes = set()
    for h in hidden:
        for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h)):
            shapes.update((m, n, k) for m in ms)
            shapes.update((8192, n, kk) for kk in (k // 4, k // 2, 2 * k))
            shapes.update((8192, nn, k) for nn in (n // 4, n // 2, 2 * n))
    return sorted(shapes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="table path (.yaml or .csv)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--gpu", help="catalogue GPU name (default: from the CUDA device)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a few shapes (about a minute)")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F  # noqa: N812

    if not torch.cuda.is_available():
        raise SystemExit("gpu_microbench needs a CUDA GPU (torch.cuda.is_available() is False)")
    device_name = torch.cuda.get_device_name()
    gpu = args.gpu or gpu_from_device_name(device_name)
    if gpu is None:
        raise SystemExit(f"cannot map {device_name!r} to a catalogue GPU; pass --gpu")
    dt = getattr(torch, DTYPES[args.dtype])
    elem = torch.tensor([], dtype=dt).element_size()
    time_of = timer(torch, args.warmup, args.iters)
    rows: list[Row] = []

    def add(op: str, size: tuple[float, ...], seconds: float, name: str) -> None:
        rows.append(Row(op, size, args.dtype, gpu, seconds, None, args.iters, name))
        print(f"{op:11s} {str(size):34s} {seconds * 1e6:10.1f} us", flush=True)

    for m, n, k in gemm_shapes(args.quick):
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt)
        add("gemm", (m, n, k, 1), time_of(lambda a=a, b=b: a @ b), "torch.matmul")
        del a, b

    heads, d = 32, 128
    for s in ((1024, 4096) if args.quick else (1024, 2048, 4096, 8192, 16384)):
        b = max(1, 16384 // s)
        q, kk, v = (torch.randn(b, heads, s, d, device="cuda", dtype=dt, requires_grad=True)
                    for _ in range(3))
        flops = 4.0 * b * s * s * heads * d
        fwd = time_of(lambda q=q, kk=kk, v=v: F.scaled_dot_product_attention(
            q, kk, v, is_causal=True))
        add("attention", (flops,), fwd, "sdpa causal forward")
        out = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        grad = torch.randn_like(out)
        both = time_of(lambda out=out, grad=grad, ins=(q, kk, v): torch.autograd.grad(
            out, ins, grad, retain_graph=True))
        add("attention", (2.5 * flops,), both, "sdpa causal backward")

    for numel in (2**e for e in range(16, 30, 2 if args.quick else 1)):
        x = torch.randn(numel, device="cuda", dtype=dt)
        y = torch.randn(numel, device="cuda", dtype=dt)
        add("elementwise", (3.0 * numel * elem,), time_of(lambda x=x, y=y: x + y), "add")
        add("elementwise", (2.0 * numel * elem,), time_of(lambda x=x: F.gelu(x)), "gelu")
        rows2 = x.view(-1, 4096) if numel >= 4096 else x.view(1, -1)
        width = rows2.shape[-1]
        add("norm", (2.0 * numel * elem,), time_of(
            lambda r=rows2, w=width: F.layer_norm(r, (w,))), "layer_norm")
        add("softmax", (2.0 * numel * elem,), time_of(
            lambda r=rows2: torch.softmax(r, dim=-1)), "softmax")
        del x, y, rows2

    write_table(args.out, rows, f"benchmarks/gpu_microbench.py on {device_name}")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
