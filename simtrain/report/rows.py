"""Which ranks and streams a per-rank chart shows, in which order, and how they are named.

Rows are ordered node -> GPU -> stream (compute streams first). Big clusters are shown by a
subset: one rank per role (ranks that ran the same work), or the first, the last and
evenly spaced ranks between, so a 16k-GPU chart stays a few dozen rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from simtrain.engine.timeline import Timeline

ServerOf = Callable[[int], int]
GPUS_PER_NODE = 8


def default_server_of(rank: int) -> int:
    """Node of a rank when the caller does not know the cluster: 8 GPUs per node."""
    return rank // GPUS_PER_NODE


def stream_sort_key(stream: str) -> tuple[int, str]:
    """Compute streams above communication streams, then by name."""
    return (0 if stream.startswith("compute") else 1, stream)


def order_ranks(ranks: Iterable[int], server_of: ServerOf | None = None) -> list[int]:
    """Ranks grouped by node, then by rank: the display order of every per-rank chart."""
    node = server_of or default_server_of
    return sorted(set(ranks), key=lambda r: (node(r), r))


def rank_labels(ranks: Iterable[int], server_of: ServerOf | None = None) -> dict[int, str]:
    """Label "node{n}/gpu{i}" per rank; i is the rank's position among its node's ranks.

    Pass every rank of the cluster (not just the displayed ones) so that GPU indices do not
    shift when a subset is shown.
    """
    node = server_of or default_server_of
    labels: dict[int, str] = {}
    seen_per_node: dict[int, int] = {}
    for rank in sorted(set(ranks)):
        n = node(rank)
        gpu = seen_per_node.get(n, 0)
        seen_per_node[n] = gpu + 1
        labels[rank] = f"node{n}/gpu{gpu}"
    return labels


def representative_ranks(ranks: Sequence[int], limit: int) -> list[int]:
    """At most ``limit`` of ``ranks`` (kept in order): the first, the last, evenly spaced between.

    Used whenever a chart would have too many rows to read; ``ranks`` is usually the output
    of :func:`order_ranks`.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if len(ranks) <= limit:
        return list(ranks)
    if limit == 1:
        return [ranks[0]]
    # Spacing (n-1)/(limit-1) > 1 when n > limit, so rounded indices are distinct.
    idx = np.linspace(0, len(ranks) - 1, limit).round().astype(int)
    return [ranks[i] for i in idx.tolist()]


def all_ranks(timeline: Timeline) -> list[int]:
    """Every rank of the timeline: 0..num_ranks-1 plus any rank seen in a span."""
    return sorted(set(range(timeline.num_ranks)) | {s.rank for s in timeline.spans})


def plural(n: int, noun: str) -> str:
    """``1 rank``, ``2 ranks``, ``1,024 servers`` (the nouns used here take a plain -s)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def subset_note(shown: int, total: int) -> str:
    """Title suffix saying a chart shows only a representative subset of ranks."""
    return f"showing {shown} of {total} ranks (first, last, evenly spaced)"


def select_rows(
    timeline: Timeline,
    ranks: Sequence[int] | None,
    server_of: ServerOf | None,
    max_rows: int,
    keep_ranks: Iterable[int] = (),
    rows_present: Iterable[tuple[int, str]] | None = None,
) -> tuple[list[tuple[int, str]], int, int]:
    """Rows to draw in display order, plus (ranks shown, ranks available).

    ``keep_ranks`` (e.g. the representatives) are always among the shown ranks.
    ``rows_present``: the timeline's distinct (rank, stream) pairs when the caller has
    them (saves a pass over the spans).
    """
    streams: dict[int, set[str]] = {}
    wanted = set(ranks) if ranks is not None else None
    present = (rows_present if rows_present is not None
               else ((s.rank, s.stream) for s in timeline.spans))
    for rank, stream in present:
        if wanted is None or rank in wanted:
            streams.setdefault(rank, set()).add(stream)
    ordered = order_ranks(streams, server_of)
    total_rows = sum(len(v) for v in streams.values())
    if total_rows > max_rows and ordered:
        per_rank = max(len(v) for v in streams.values())
        keep = max(min(2, len(ordered)), max_rows // per_rank)
        wanted_first = set(keep_ranks)
        must = [r for r in ordered if r in wanted_first]
        if len(must) >= keep:
            must = representative_ranks(must, keep)
        # Room for more ranks than the kept ones, so a menu can add some (up to 8 beyond
        # max_rows when the kept ranks fill it).
        others = [r for r in ordered if r not in set(must)]
        extra = max(keep - len(must), min(len(must), 8)) if must else keep
        chosen = set(must) | set(representative_ranks(others, extra) if others else ())
        ordered = [r for r in ordered if r in chosen]
    rows = [(r, st) for r in ordered for st in sorted(streams[r], key=stream_sort_key)]
    return rows, len(ordered), len(streams)


def role_representatives(timeline: Timeline, ranks: Iterable[int] | None = None) -> list[int]:
    """One rank per role: the lowest rank of each group of ranks that ran the same work.

    Two ranks share a role when they ran the same multiset of (kind, name) spans (e.g. every
    DP replica of one pipeline stage); stream names (which may name ring peers) and timing
    differences (stragglers) do not matter. O(spans). Returned in rank order.
    """
    wanted = set(ranks) if ranks is not None else None
    fingerprint: dict[int, list[int]] = {}
    for s in timeline.spans:
        if wanted is not None and s.rank not in wanted:
            continue
        fp = fingerprint.get(s.rank)
        if fp is None:
            fp = fingerprint[s.rank] = [0, 0]
        fp[0] += hash((s.kind, s.name))
        fp[1] += 1
    first: dict[tuple[int, int], int] = {}
    for rank in sorted(fingerprint):
        first.setdefault((fingerprint[rank][0], fingerprint[rank][1]), rank)
    return sorted(first.values())
