"""`poet profile`: measure every op of some graphs on a board, and its paging, into profiles/<board>.yaml.

Each graph runs under a keep-everything schedule, step after step, until every op's ticks
agree within `spread` (or `max_repeats` steps ran). Then a tiny synthetic model whose only
work is paging one tensor out and back in is run at sizes from 256 B up, and
`t = latency + bytes / throughput` is fitted per direction.

The file is rewritten after every finished graph and after the paging sweep, with what is
done marked, so an interrupted profile (Ctrl-C, a pulled cable, a stopped emulator) keeps
its finished part and the same command resumes it. Every write merges with the file on disk
under a lock (write_profile), so two `poet profile` runs into one file both keep their ops.
What the planner reads from the file (costs.costed) is `time_s` / `energy_j` per op and the
`paging` section; every number says where it comes from.

One module per job: ops.py times the ops, paging.py fits paging, casts.py the casts and int8
kernels (--casts), file.py reads, merges and writes the file, provenance.py says where each
number comes from, stopped.py how a profile stopped midway says so. This package's names are
what `poet profile` and its callers use.
"""

from poet.device.profile.casts import (
    CAST_ROUNDS,
    CAST_SIZES,
    cast_directions,
    cast_model,
    cast_schedule,
    fit_cycles,
    int8_layer_model,
    profile_casts,
)
from poet.device.profile.file import (
    PROFILE_KEYS,
    existing_profile,
    lock_path,
    merge_profiles,
    new_profile,
    resumable,
    write_profile,
)
from poet.device.profile.ops import COMPUTE_KINDS, Settings, measured_nodes, profile_graphs
from poet.device.profile.paging import (
    PAGE_ROUNDS,
    PAGE_SIZES,
    fit_line,
    page_sizes,
    paging_model,
    paging_schedule,
    profile_paging,
)
from poet.device.profile.provenance import SEEDS, Seed
from poet.device.profile.stopped import ProfileInterrupted

__all__ = [
    "CAST_ROUNDS", "CAST_SIZES", "COMPUTE_KINDS", "PAGE_ROUNDS", "PAGE_SIZES", "PROFILE_KEYS", "SEEDS",
    "ProfileInterrupted", "Seed", "Settings", "cast_directions", "cast_model", "cast_schedule", "existing_profile",
    "fit_cycles", "fit_line", "int8_layer_model", "lock_path", "measured_nodes", "merge_profiles", "new_profile",
    "page_sizes", "paging_model", "paging_schedule", "profile_casts", "profile_graphs", "profile_paging",
    "resumable", "write_profile",
]
