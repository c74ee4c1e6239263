"""What a rank waits for before it reaches a collective, as the executor splits a
collective's dependencies (``Executor._dep_ids``), for many (collective, rank) at once.

Rank ``r`` of collective ``c`` waits for each dependency ``d`` of ``c`` that ``r`` takes
part in, and for each that none of ``c``'s ranks does (unless all of ``d``'s ranks are
virtual); the other ranks' own dependencies are theirs to wait for. Worked out once per
(collective, dependency), not per rank: a data-parallel all-reduce over 128 ranks has 128
dependencies, of which each rank waits for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simtrain.engine.lockstep_layout import StreamLayout, expand

if TYPE_CHECKING:
    from simtrain.engine.lockstep import _Columns


def waited(layout: StreamLayout, columns: _Columns, tids: np.ndarray,
           ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, count, deps): rank ``ranks[i]`` waits for ``deps[start[i]:start[i] +
    count[i]]`` before collective ``tids[i]``, in dependency order."""
    seen = np.zeros(columns.tasks + 1, dtype=np.int64)
    seen[tids] = 1
    tasks = np.flatnonzero(seen)  # the distinct collectives, by id
    query = (np.cumsum(seen) - 1)[tids]
    n = columns.dep_count[tasks]
    pos = expand(columns.dep_start[tasks], n)  # increasing: dependency order
    deps = columns.dep_ids[pos]
    owner = np.repeat(np.arange(len(tasks)), n)
    code_dep, code_task = layout.gcode[deps], layout.gcode[tasks][owner]
    fsize = layout.full_sizes[code_dep]
    # specific: (owner, pos, rank) waited for by that rank only; common: (owner, pos)
    one = np.flatnonzero(fsize == 1)
    rank = layout.full_flat[layout.full_start[code_dep[one]]]
    member = layout.in_full_group(code_task[one], rank)
    simulated = ~layout.is_virtual[rank]
    spec = [(owner[one[member & simulated]], pos[one[member & simulated]],
             rank[member & simulated])]
    common = [one[~member & simulated]]
    many = np.flatnonzero(fsize >= 2)
    if len(many):  # by (dependency's group, collective's group)
        width = len(layout.full_sizes)
        pairs, which = np.unique(code_dep[many] * width + code_task[many], return_inverse=True)
        dep_group, task_group = pairs // width, pairs % width
        n_ranks = layout.full_sizes[dep_group]
        pair = np.repeat(np.arange(len(pairs)), n_ranks)
        ranks_of = layout.full_flat[expand(layout.full_start[dep_group], n_ranks)]
        inside = layout.in_full_group(task_group[pair], ranks_of)
        disjoint = np.bincount(pair[inside], minlength=len(pairs)) == 0
        common.append(many[(disjoint & (layout.sizes[dep_group] > 0))[which]])
        kept = inside & ~layout.is_virtual[ranks_of]
        n_kept = np.bincount(pair[kept], minlength=len(pairs))
        kept_ranks = ranks_of[kept]  # by pair
        idx = np.repeat(many, n_kept[which])
        spec.append((owner[idx], pos[idx],
                     kept_ranks[expand((np.cumsum(n_kept) - n_kept)[which], n_kept[which])]))
    s_owner = np.concatenate([s[0] for s in spec])
    s_pos = np.concatenate([s[1] for s in spec])
    s_rank = np.concatenate([s[2] for s in spec])
    s_key = s_owner * layout.num_ranks + s_rank
    width = max(len(columns.dep_ids), 1)
    if int(s_key.max(initial=0)).bit_length() + width.bit_length() <= 62:
        packed = s_key * width + s_pos
        packed.sort()
        s_key, s_pos = packed // width, packed % width
    else:
        order = np.lexsort((s_pos, s_key))
        s_key, s_pos = s_key[order], s_pos[order]
    s_dep = columns.dep_ids[s_pos]
    key = query * layout.num_ranks + ranks
    lo, hi = np.searchsorted(s_key, key), np.searchsorted(s_key, key, side="right")
    c_idx = np.sort(np.concatenate(common))
    if not len(c_idx):
        return lo, hi - lo, s_dep
    # Merge each query's specific and common dependencies in dependency order.
    c_owner = owner[c_idx]
    c_lo = np.searchsorted(c_owner, query)
    c_hi = np.searchsorted(c_owner, query, side="right")
    ns, nc = hi - lo, c_hi - c_lo
    from_s, from_c = expand(lo, ns), expand(c_lo, nc)
    which_q = np.concatenate([np.repeat(np.arange(len(key)), ns),
                              np.repeat(np.arange(len(key)), nc)])
    dep_pos = np.concatenate([s_pos[from_s], pos[c_idx][from_c]])
    values = np.concatenate([s_dep[from_s], deps[c_idx][from_c]])
    merged = np.lexsort((dep_pos, which_q))
    count = ns + nc
    return np.cumsum(count) - count, count, values[merged]
