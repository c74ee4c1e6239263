"""Where each job of a shared cluster runs: explicit GPU lists, or the "pack" / "spread" policies.

A placement is written in a job's ``placement:`` field as

- ``pack``: the lowest-numbered free GPUs, so a job fills whole servers (and the servers
  under one leaf) before it touches the next: the least traffic on the shared fabric;
- ``spread``: one free GPU of every server in turn (round robin over servers), so a job
  takes the same share of each server and its data-parallel traffic crosses the fabric;
- explicit GPUs: ``"0-7,16-23"``, ``[0, 8]`` or ``["0-3", 12]``. The job's local rank
  ``i`` runs on the ``i``-th GPU listed, so the order is the user's rank mapping.

Explicit placements are taken first (in file order), then the policies fill the free GPUs
in file order. Every problem (a GPU outside the cluster, one listed twice or by two jobs,
too few free GPUs) is a ``ValueError`` whose message the loader puts in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simtrain.limits import MAX_GPUS

# The placement policies (the one list of their names).
POLICIES: tuple[str, ...] = ("pack", "spread")


@dataclass(frozen=True)
class Request:
    """One job's placement as written: a policy name or explicit GPUs, and its GPU count."""

    job: str
    policy: str | None  # "pack" / "spread", or None for explicit GPUs
    gpus: tuple[int, ...] = ()  # explicit GPUs in local-rank order
    count: int = 0  # GPUs the job needs (= len(gpus) when explicit)


def parse_gpus(value: Any) -> tuple[int, ...]:
    """GPU ids of ``"0-7,16-23"``, ``[0, 8]`` or ``["0-3", 12]`` in the order written
    (ranges ascending, both ends inclusive); ValueError on anything else."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"expected pack, spread or GPUs such as \"0-7,16-23\" or [0, 8], "
                         f"got {value!r}")
    out: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ValueError(f"expected a GPU number or a range such as 0-7, got {item!r}")
        if isinstance(item, int):
            out.append(item)
            continue
        lo, sep, hi = item.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(f"expected a GPU number or a range such as 0-7, got "
                             f"{item.strip()!r}") from None
        if last < first:
            raise ValueError(f"range {item.strip()!r} ends before it starts; write it "
                             f"low-high, e.g. {last}-{first}")
        if last - first >= MAX_GPUS:  # checked against the cluster later; bound it first
            raise ValueError(f"range {item.strip()!r} has {last - first + 1:,} GPUs, more "
                             f"than the {MAX_GPUS:,} a cluster may have")
        out.extend(range(first, last + 1))
    return tuple(out)


def parse_request(job: str, value: Any, count: int | None) -> Request:
    """The request of ``job`` from its ``placement`` value and ``gpus`` count (None: not
    given); ValueError when a policy has no count or a count disagrees with the GPUs."""
    if isinstance(value, str) and value.strip().lower() in POLICIES:
        if count is None:
            raise ValueError(f"placement {value.strip().lower()} needs the job's size: set "
                             f"gpus (e.g. gpus: 16) or list the GPUs")
        return Request(job, value.strip().lower(), (), count)
    gpus = parse_gpus(value)
    if count is not None and count != len(gpus):
        raise ValueError(f"lists {len(gpus)} GPUs but gpus is {count}; give one of them "
                         f"or make them agree")
    return Request(job, None, gpus, len(gpus))


def fmt_gpus(gpus: Sequence[int]) -> str:
    """Compact ranges of ``gpus`` in their order: (0, 1, 2, 3, 8) -> "0-3,8"."""
    parts: list[str] = []
    i = 0
    while i < len(gpus):
        j = i
        while j + 1 < len(gpus) and gpus[j + 1] == gpus[j] + 1:
            j += 1
        parts.append(str(gpus[i]) if i == j else f"{gpus[i]}-{gpus[j]}")
        i = j + 1
    return ",".join(parts)


def resolve(requests: Sequence[Request], servers: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """GPUs of every job on a cluster whose GPU ``r`` sits in server ``servers[r]``.

    Raises ValueError("<job>: ...") naming the job whose placement is impossible: a GPU
    outside 0..len(servers)-1, a GPU listed twice or already another job's, or a policy
    needing more GPUs than are free.
    """
    total = len(servers)
    owner: dict[int, str] = {}
    out: dict[str, tuple[int, ...]] = {}
    for req in requests:
        if req.policy is not None:
            continue
        for gpu in req.gpus:
            if not 0 <= gpu < total:
                raise ValueError(f"{req.job}: GPU {gpu} is not in the cluster; accepted: "
                                 f"GPUs 0..{total - 1} ({total} GPUs)")
            if gpu in owner:
                other = owner[gpu]
                what = "listed twice" if other == req.job else f"already taken by job {other!r}"
                raise ValueError(f"{req.job}: GPU {gpu} is {what}; placements may not "
                                 f"overlap")
            owner[gpu] = req.job
        out[req.job] = req.gpus
    for req in requests:
        if req.policy is None:
            continue
        free = [g for g in range(total) if g not in owner]
        if req.count > len(free):
            taken = ", ".join(f"{job} {len(gpus)}" for job, gpus in out.items())
            raise ValueError(f"{req.job}: needs {req.count} GPUs but only {len(free)} of the "
                             f"cluster's {total} are free" + (f" (placed before it: {taken})"
                                                              if taken else ""))
        chosen = (tuple(free[:req.count]) if req.policy == "pack"
                  else _round_robin(free, servers, req.count))
        for gpu in chosen:
            owner[gpu] = req.job
        out[req.job] = chosen
    return {req.job: out[req.job] for req in requests}


def _round_robin(free: Sequence[int], servers: Sequence[int], count: int) -> tuple[int, ...]:
    """``count`` of ``free`` taken one per server in turn (servers in order), ascending."""
    by_server: dict[int, list[int]] = {}
    for gpu in free:
        by_server.setdefault(servers[gpu], []).append(gpu)
    queues = [by_server[s] for s in sorted(by_server)]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < count:
        for queue in queues:
            if depth < len(queue) and len(chosen) < count:
                chosen.append(queue[depth])
        depth += 1
    return tuple(sorted(chosen))


def servers_used(gpus: Sequence[int], servers: Sequence[int]) -> Mapping[int, int]:
    """GPUs of ``gpus`` per server, servers in order of first use."""
    out: dict[int, int] = {}
    for gpu in gpus:
        out[servers[gpu]] = out.get(servers[gpu], 0) + 1
    return out
