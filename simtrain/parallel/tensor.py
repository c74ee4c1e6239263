"""Tensor and sequence parallelism: Megatron's collectives, and TP communication overlap.

TP and SP shape the layer (``shard.py``: column/row-parallel GEMMs, the f and g
conjugate operators, SP's all-gather/reduce-scatter); their collectives are plain
``Collective`` templates over the "tp" group. This module adds Megatron-Core's
``--tp-comm-overlap`` (Transformer Engine userbuffers; needs SP): each TP all-gather is
pipelined with the GEMM run that consumes it, and each TP reduce-scatter with the GEMM run
that produces it, in n = tp chunks (ring exchange). The chunked pipeline's makespan is
c/n + (n-1)·max(c/n, g/n) + g/n (c: comm time, g: GEMM time); it is modelled exactly by
two pieces per side: all-gather -> AG_first (1/n of the bytes), AG_rest ((n-1)/n, after
AG_first), GEMM_main ((n-1)/n of the GEMM, after AG_first), GEMM_last (1/n, after
GEMM_main and AG_rest); reduce-scatter -> GEMM_first (1/n), GEMM_rest ((n-1)/n), RS_main
((n-1)/n of the bytes, after GEMM_first), RS_last (1/n, after RS_main and GEMM_rest). The
GEMM run is the contiguous non-expert GEMM kernels of one layer and kind next to the
collective (e.g. backward dgrad + wgrad); TP all-reduces (no SP) are not overlapped. Each
piece pays the collective's launch latency, so latency-bound (small) TP collectives may get
slower, not faster. At "stage" granularity the option degrades to no overlap (``fuse.py``).

``impl`` "symm_mem" is PyTorch's async TP instead (torchtitan: inductor's
``micro_pipeline_tp_pass``, ``torch/_inductor/fx_passes/micro_pipeline_tp.py``, read in the
torch 2.6.0 wheel, the release of the suites' runs, and unchanged in later ones; replacing
the pattern with ``torch.distributed._symmetric_memory``'s fused ops), which fuses less:
``fuse_all_gather_matmul`` takes only the matmuls whose left operand is the gathered tensor
(``_find_consumer_matmuls``), so a backward all-gather pipelines the dgrad (dY·W) but not
the wgrad (dYᵀ·X: the gathered dY is its transposed left operand), which runs after the
fused op; ``fuse_matmul_reduce_scatter`` needs the reduce-scatter's input to be one matmul
(``_find_producer_matmul``: ``mm`` or reshape-mm-reshape), so the backward reduce-scatter
of an input several separate linears read (torchtitan's wq, wk, wv and w1, w3: autograd
sums their dgrads with ``add``) stays a plain NCCL reduce-scatter after the block's GEMMs,
in autograd's order (each linear's dgrad then wgrad); a single linear's dgrad is fused at
the reduce-scatter's place, after the wgrad.
"""

from __future__ import annotations

from typing import Any

from simtrain.parallel.emit import Emitter
from simtrain.parallel.templates import Collective, Kernel, Template, TPOverlap
from simtrain.workload.userbuffers import userbuffers_sms


def overlap_tp(templates: list[Template], impl: str = "userbuffers") -> list[Template]:
    """Turn each TP all-gather and the GEMM run after it, and each TP reduce-scatter and the
    GEMM run before it, into one ``TPOverlap``.

    A GEMM run is the contiguous non-expert GEMM kernels of one layer and kind (forward,
    backward, recompute) next to the collective. A collective without such a run, and TP
    all-reduces, are left as they are. ``impl`` "symm_mem" pipelines only what PyTorch's
    pass fuses (module docstring: ``symm_mem_gather``, ``symm_mem_scatter``).
    """

    def joins(t: Template, ref: Template) -> bool:
        return (isinstance(t, Kernel) and isinstance(ref, Kernel) and t.gemm and not t.expert
                and t.kind == ref.kind and t.layer == ref.layer)

    out: list[Template] = []
    i = 0
    while i < len(templates):
        t = templates[i]
        if isinstance(t, Collective) and t.group == "tp" and t.op == "all_gather":
            j = i + 1
            while j < len(templates) and joins(templates[j], templates[i + 1]):
                j += 1
            if j > i + 1:
                fused, rest = (symm_mem_gather(templates[i + 1:j]) if impl == "symm_mem"
                               else (templates[i + 1:j], []))
                out += [_overlapped(t, fused), *rest] if fused else [t, *rest]
                i = j
                continue
        elif (isinstance(t, Collective) and t.group == "tp" and t.op == "reduce_scatter"
              and out):
            k = len(out)
            while k > 0 and joins(out[k - 1], out[-1]):
                k -= 1
            if k < len(out):
                run = out[k:]
                del out[k:]
                before, fused = (symm_mem_scatter(run) if impl == "symm_mem"
                                 else ([], run))
                out += [*before, _overlapped(t, fused)] if fused else [*before, t]
                i += 1
                continue
        out.append(t)
        i += 1
    return out


def symm_mem_gather(run: list[Template]) -> tuple[list[Template], list[Template]]:
    """(fused, after) of the GEMM ``run`` after a TP all-gather under PyTorch's async TP:
    the matmuls with the gathered tensor as left operand (every forward one; a backward
    run's input-gradient GEMMs), and the rest (the wgrads), which follow the fused op."""
    fused: list[Template] = [k for k in run if isinstance(k, Kernel)
                             and (k.kind != "backward" or k.grad == "input")]
    ids = {id(k) for k in fused}
    return fused, [k for k in run if id(k) not in ids]


def symm_mem_scatter(run: list[Template]) -> tuple[list[Template], list[Template]]:
    """(before, fused) of the GEMM ``run`` before a TP reduce-scatter under PyTorch's async
    TP: the reduce-scatter's producer (the last input-gradient GEMM of a backward run, the
    last GEMM otherwise) is fused when it is one linear's, and the rest runs before it;
    when it sums several linears' dgrads nothing is fused (``fused`` empty)."""
    producers = [k for k in run if isinstance(k, Kernel)
                 and (k.kind != "backward" or k.grad == "input")]
    if not producers or producers[-1].linears > 1:
        return run, []
    last = producers[-1]
    return [k for k in run if k is not last], [last]


def _overlapped(comm: Collective, run: list[Template]) -> TPOverlap:
    kernels = tuple(k for k in run if isinstance(k, Kernel))
    assert len(kernels) == len(run), "a GEMM run holds kernels only"
    return TPOverlap(comm, kernels)


def emit_tp_overlap(em: Emitter, stage: int, t: TPOverlap, meta: dict[str, Any], *,
                    gather: bool, grads: bool, impl: str = "userbuffers") -> None:
    """A TP all-gather or reduce-scatter pipelined with its GEMM run in n = tp chunks, as two
    pieces per side (module docstring): makespan c/n + (n-1)·max(c, g)/n + g/n. Under
    ``impl`` "userbuffers" the pieces hold TE's SMs (``workload.userbuffers``), not NCCL's."""
    st, g = em.state, em.graph
    c, run = t.comm, t.run
    n = em.dims.tp
    base = sum(p.base for p in run)
    flops = sum(p.flops for p in run)
    params = tuple(q for p in run for q in p.params)
    reads = tuple(q for p in run for q in p.reads)
    kind = run[0].kind
    gname = run[0].name
    if len(run) > 1:
        gname += "+" + "+".join(p.name.rsplit(".", 1)[-1] for p in run[1:])
    m = {**meta, "tp_overlap_chunks": n}
    # TE's userbuffers hold their own SM count, not NCCL's channels (workload.userbuffers);
    # PyTorch's symmetric-memory pipeline keeps the NCCL charge (0).
    sms = userbuffers_sms(c.op) if impl == "userbuffers" else 0
    big, small = (n - 1) / n, 1 / n

    def gemm(r: int, piece: str, frac: float, deps: list[int]) -> int:
        return g.compute(r, f"{gname} ({piece}/{n})", base * frac, kind=kind, deps=deps,
                         flops=flops * frac, meta=m)

    for grp in em.groups(stage, c.group):
        local = [r for r in grp if r in em.simulated]
        deps = em.group_deps(grp)
        waits = {r: em.param_waits(r, reads) if gather else [] for r in local}
        if c.op == "all_gather":
            fid = em.coll(c.op, grp, c.nbytes * small, f"{c.name} (1/{n})", kind=c.kind,
                          stream=c.group, deps=deps, meta=m, sms=sms)
            rest = em.coll(c.op, grp, c.nbytes * big, f"{c.name} (2-{n}/{n})", kind=c.kind,
                           stream=c.group, deps=[fid], meta=m, sms=sms)
            for r in local:
                main = gemm(r, f"1-{n - 1}", big, [fid, *waits[r]])
                last = gemm(r, f"{n}", small, [main, rest])
                st.frontier[r] = [last]
                if grads:
                    for p in params:
                        st.grad_ready[(r, p)] = last
            if grads and st.prepass is not None:
                st.prepass.ready(em, stage, local, [st.frontier[r][0] for r in local], params)
        else:
            assert c.op == "reduce_scatter", f"no TP overlap for {c.op}"
            firsts, rests = {}, {}
            for r in local:
                firsts[r] = gemm(r, "1", small, [*em.dep(r), *waits[r]])
                rests[r] = gemm(r, f"2-{n}", big, [firsts[r]])
                if grads:
                    for p in params:
                        st.grad_ready[(r, p)] = rests[r]
            after: dict[int, list[int]] = {}
            if grads and st.prepass is not None:  # the passes follow the GEMM, not the RS
                for r in local:
                    st.frontier[r] = [rests[r]]
                st.prepass.ready(em, stage, local, [rests[r] for r in local], params)
                after = {r: st.frontier[r] for r in local}
            rs_main = em.coll(c.op, grp, c.nbytes * big, f"{c.name} (1-{n - 1}/{n})",
                              kind=c.kind, stream=c.group, deps=sorted(firsts.values()),
                              meta=m, sms=sms)
            rs_last = em.coll(c.op, grp, c.nbytes * small, f"{c.name} ({n}/{n})",
                              kind=c.kind, stream=c.group,
                              deps=sorted({rs_main, *rests.values()}), meta=m, sms=sms)
            for r in grp:
                st.frontier[r] = [rs_last, *after.get(r, [])]
