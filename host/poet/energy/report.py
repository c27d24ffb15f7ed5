"""`poet report`: an energy account (poet.energy.accounting) as terminal tables, a long-form CSV, a
Chrome trace and PNG plots (matplotlib, Agg, imported only when --plot asks).

Every report says its source in the header: modelled (trace ticks x the board's datasheet
power, paging bytes x its storage model) or measured (a meter's joules per record: `--meter`,
a recording aligned with the trace by the host times of its steps or, with `--markers CH`, by the op
marker's pulses on a logic input of the meter; poet.energy.meters.measure).
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poet.boards import Board
from poet.energy.accounting import KINDS, PAGING, Account, Box, DiffRow, Entry, account, edd, fold, sd_read_cost, walk
from poet.energy.fmt import fmt_j, fmt_s, fmt_w, pct
from poet.energy.meters.measure import Measured, measure
from poet.energy.tracefile import SCHEDULE_BESIDE, SUFFIX_BESIDE, Trace
from poet.errors import UsageError
from poet.files import atomic, kind, same_file, write_atomic
from poet.graph.dtypes import NARROW_STORAGE, converted_bytes
from poet.ops import STATIC_INT8_LAYERS, STATIC_INT8_OPS
from poet.progress import Say
from poet.units import format_size

VIEWS = ("module", "layer", "tensor", "kind")


def source_line(acct: Account, trace: Trace, board: Board) -> str:
    if acct.source == "measured":
        return (f"measured: a power meter's joules per record; board time from the trace's {trace.provenance} "
                f"ticks ({trace.tick_hz / 1e6:g} MHz timer)")
    power = board.raw.get("power", {}).get("source", "datasheet")
    st = board.storage
    return (f"modelled: {trace.provenance} ticks ({trace.tick_hz / 1e6:g} MHz timer) -> board time at "
            f"{board.clock_hz / 1e6:g} MHz, CPI {board.cpi:g} x CPU active {board.cpu_active_w * 1e3:g} mW ({power}); "
            f"paging bytes x the {st.get('kind', 'storage')} model ({st.get('source', '?')})")


def header(acct: Account, trace: Trace, board: Board, measured: Measured | None = None) -> list[str]:
    n = max(acct.steps, 1)
    mean_w = acct.total_j / acct.total_s if acct.total_s else 0.0
    return [
        f"energy of {acct.steps} training step(s) of {acct.model} on {acct.board} ({acct.source})",
        *(measured.lines if measured is not None else [f"  source: {source_line(acct, trace, board)}"]),
        f"  total {fmt_j(acct.total_j).strip()} in {fmt_s(acct.total_s).strip()} of board time "
        f"(mean {fmt_w(mean_w).strip()}); per step {fmt_j(acct.total_j / n).strip()}, "
        f"{fmt_s(acct.total_s / n).strip()}",
        f"  recompute {pct(acct.by_kind['recompute'][0], acct.total_j).strip()}, paging "
        f"{pct(acct.by_kind['page_in'][0] + acct.by_kind['page_out'][0], acct.total_j).strip()} "
        f"(page-in {pct(acct.by_kind['page_in'][0], acct.total_j).strip()}, page-out "
        f"{pct(acct.by_kind['page_out'][0], acct.total_j).strip()}), "
        + (f"feature cache {pct(acct.by_kind['cache'][0], acct.total_j).strip()}, " if acct.by_kind['cache'][0] else "")
        + f"runtime overhead {pct(acct.by_kind['overhead'][0], acct.total_j).strip()} of the energy",
        *precision_lines(acct, trace),
        *sd_lines(acct, trace, board),
    ]


def sd_lines(acct: Account, trace: Trace, board: Board) -> list[str]:
    """Layers whose int8 weights stream from the SD card (poet.plan.transform.placement): how many reads their
    records made and what the card's storage model says they cost, charged to those layers."""
    streamed = {i: n["sd_reads"] for i, n in enumerate(trace.nodes) if n.get("sd_reads")}
    if not streamed:
        return []
    # how many records of each streaming layer read its weight; each such record makes all its reads
    runs = {i: 0 for i in streamed}
    for st in trace.steps:
        for r in st["records"]:
            if r[1] in runs and r[2] in ("forward", "recompute"):
                runs[r[1]] += 1
    each = {i: sd_read_cost(board, reads) for i, reads in streamed.items()}
    t = sum(each[i][0] * m for i, m in runs.items())
    e = sum(each[i][1] * m for i, m in runs.items())
    n_reads = sum(len(streamed[i]) * m for i, m in runs.items())
    n_bytes = sum(sum(streamed[i]) * m for i, m in runs.items())
    per = n_reads // max(acct.steps, 1)
    return [f"  weights streamed from the SD card: {len(streamed)} layer(s), {per:,} reads of "
            f"{format_size(n_bytes // max(acct.steps, 1))} a step; {fmt_j(e).strip()} and {fmt_s(t).strip()} "
            f"({pct(e, acct.total_j).strip()} of the energy, storage model), charged to those layers"]


def precision_lines(acct: Account, trace: Trace) -> list[str]:
    """Which tensors the plan stored narrow (poet.plan.transform.precision's cast nodes, named `<tensor>/<type>` and
    `<tensor>/<type>/fp32` for the way back), which layers ran in int8, and what the casts and int8
    scales cost; a frozen prefix in static int8 (poet.plan.transform.static_int8) and what it cost; nothing for
    an fp32 plan."""
    narrow = [n for n in trace.nodes if n.get("op") == "cast" and n["name"].rsplit("/", 1)[-1] in NARROW_STORAGE]
    layers = [n for n in trace.nodes if n.get("op") in ("linear_i8", "conv2d_i8")]
    static = [n for n in trace.nodes if n.get("op") in STATIC_INT8_OPS]
    if not narrow and not layers:
        return static_int8_lines(acct, static)
    cost = sum(acct.tensors[n["name"]].energy_j for n in trace.nodes
               if n.get("op") in ("cast", "absmax") and n["name"] in acct.tensors)
    out = [f"  precision: {len(narrow)} tensor(s) stored narrow, {len(layers)} layer(s) in int8; casts and int8 "
           f"scales {fmt_j(cost).strip()} ({pct(cost, acct.total_j).strip()} of the energy)"]
    for n in narrow:
        src, dt = n["name"].rsplit("/", 1)
        fp32 = converted_bytes(n["bytes"], dt, "fp32")
        out.append(f"    {src}: fp32 -> {dt}, {fp32} B -> {n['bytes']} B")
    out += [f"    {n['name']}: int8 forward (int32 accumulate), fp32 backward" for n in layers]
    return out + static_int8_lines(acct, static)


def static_int8_lines(acct: Account, static: list[dict]) -> list[str]:
    """A frozen prefix run in static int8: its layers, and their share of the energy with the
    quantize and dequantize at its edges."""
    if not static:
        return []
    energy = sum(acct.tensors[n["name"]].energy_j for n in static if n["name"] in acct.tensors)
    count = {op: sum(1 for n in static if n["op"] == op) for op in STATIC_INT8_OPS}
    # conv2d_q and add_q are always named; any other layer op only where the prefix has it
    more = [op for op in STATIC_INT8_LAYERS if op not in ("conv2d_q", "add_q")]
    pools = "".join(f", {count[op]} {op}" for op in more if count[op])
    layers = sum(count[op] for op in STATIC_INT8_LAYERS)
    return [f"  static int8 prefix: {layers} frozen layer(s) "
            f"({count['conv2d_q']} conv2d_q, {count['add_q']} add_q{pools}; {count['quantize']} quantize, "
            f"{count['dequantize']} dequantize), "
            f"scales fixed by calibration: {fmt_j(energy).strip()} "
            f"({pct(energy, acct.total_j).strip()} of the energy)"]


def _row(name: str, e: Entry, total: float, width: int) -> str:
    paging = sum(e.kinds.get(k, 0.0) for k in PAGING)
    return (f"  {name:<{width}} {fmt_j(e.energy_j)} {pct(e.energy_j, total)} {fmt_s(e.time_s)} "
            f"{fmt_w(e.power_w)} {fmt_j(e.kinds.get('recompute', 0.0))} {fmt_j(paging)}").rstrip()


def _head(title: str, width: int, extra: bool = True) -> str:
    cols = f"  {title:<{width}} {'energy':>12} {'share':>6} {'time':>13} {'power':>11}"
    return cols + (f" {'recompute':>12} {'paging':>12}" if extra else "")


def kind_table(acct: Account) -> list[str]:
    w = 14
    lines = [_head("by kind", w, extra=False)]
    for k in KINDS:
        e, t = acct.by_kind[k]
        lines.append(f"  {k:<{w}} {fmt_j(e)} {pct(e, acct.total_j)} {fmt_s(t)} {fmt_w(e / t if t else 0.0)}")
    return lines


def module_table(acct: Account, depth: int, folded: bool = False) -> list[str]:
    root = edd(acct)
    if folded:
        root = fold(root)
    rows = walk(root, depth)
    names = [("  " * lvl) + b.name + (f" (x{b.count})" if b.count > 1 else "") for lvl, b in rows]
    w = max(24, *(len(n) for n in names))
    title = f"by module ({'summarized, ' if folded else ''}depth {depth})"
    return [_head(title, w)] + [_row(n, b, acct.total_j, w) for n, (_, b) in zip(names, rows, strict=True)]


def _ranked(entries: dict[str, Entry], top: int | None) -> list[tuple[str, Entry]]:
    ranked = sorted(entries.items(), key=lambda kv: (-kv[1].energy_j, kv[0]))
    return ranked[:top] if top else ranked


def flat_table(title: str, entries: dict[str, Entry], total: float, top: int | None) -> list[str]:
    ranked = _ranked(entries, top)
    w = max(24, *(len(n) for n, _ in ranked)) if ranked else 24
    label = f"{title} (top {len(ranked)} of {len(entries)})" if top and len(entries) > len(ranked) else title
    return [_head(label, w)] + [_row(n, e, total, w) for n, e in ranked]


def folded_tensors(acct: Account) -> dict[str, Entry]:
    """The tensor footprint with self-similar blocks folded: the leaves of the summarized EDD."""
    out: dict[str, Entry] = {}
    for _, b in walk(fold(edd(acct))):
        if not b.children:
            out[b.path + (f" (x{b.count})" if b.count > 1 else "")] = b
    return out


def render(acct: Account, trace: Trace, board: Board, by: str | None = None, depth: int | None = None,
           top: int | None = None, folded: bool = False, measured: Measured | None = None) -> str:
    """The terminal report: the header, then one view (`by`), or kinds, modules and top tensors.

    The module tree goes `depth` levels below the model (default 2: modules and their tensors
    on a flat model); the tensor list shows the `top` (default 5), the layer list all. A
    measured account also shows the modelled one beside it, kind by kind."""
    lines = header(acct, trace, board, measured)
    if measured is not None:
        lines += ["", *versus_table(acct, measured.modelled)]
    tensors = folded_tensors(acct) if folded else acct.tensors
    views = {
        "kind": lambda: kind_table(acct),
        "module": lambda: module_table(acct, 2 if depth is None else depth, folded),
        "layer": lambda: flat_table("by layer", acct.layers, acct.total_j, top),
        "tensor": lambda: flat_table("by tensor", tensors, acct.total_j, top or 5),
    }
    for v in ([by] if by else ["kind", "module", "tensor"]):
        lines += ["", *views[v]()]
    return "\n".join(lines)


def versus_table(acct: Account, modelled: Account) -> list[str]:
    """Measured next to modelled, in total and by kind."""
    lines = [f"  {'measured vs modelled':<20} {'measured':>12} {'modelled':>12} {'difference':>11}"]
    rows = [("total", acct.total_j, modelled.total_j)]
    rows += [(k, acct.by_kind[k][0], modelled.by_kind[k][0]) for k in KINDS]
    for name, m, e in rows:
        d = f"{100 * (m - e) / e:+10.1f}%" if e else f"{'-':>11}"
        lines.append(f"  {name:<20} {fmt_j(m)} {fmt_j(e)} {d}")
    return lines


# ---------------------------------------------------------------- files

def write_csv(acct: Account, path: Path) -> None:
    """Long form, one row per step x tensor x kind (Smaragdine's footprint CSV), joules and seconds."""
    rows: dict[tuple[int, str, str], list[Any]] = {}
    for c in acct.charges:
        key = (c.step, c.tensor, c.kind)
        if key not in rows:
            rows[key] = [c.step, c.module, c.tensor, c.kind, 0.0, 0.0, acct.source]
        rows[key][4] += c.energy_j
        rows[key][5] += c.time_s
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["step", "module", "tensor", "kind", "energy_j", "time_s", "source"])
    for r in rows.values():
        w.writerow([*r[:4], repr(r[4]), repr(r[5]), r[6]])
    write_atomic(path, f.getvalue())  # a fresh file renamed over the target: never through a link, never half


def chrome_trace(acct: Account, trace: Trace, board: Board) -> dict[str, Any]:
    """Chrome trace-event JSON (opens in Perfetto and chrome://tracing): one complete event per record on
    board time (µs), the power of each as a counter track, steps on a second track, the board named."""
    pid = 1
    ev: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"poet {acct.model} on {acct.board} ({trace.provenance} trace, {acct.source} energy)"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "ops"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "steps"}},
    ]
    step_span: dict[int, list[float]] = {}
    for c in acct.charges:
        ts, dur = c.start_s * 1e6, c.time_s * 1e6
        ev.append({"name": c.tensor, "cat": c.kind, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": 1,
                   "args": {"bytes": c.bytes, "energy_j": c.energy_j, "module": c.module, "step": c.step,
                            "record": c.record}})
        if c.time_s > 0:  # a zero-length record (a free of 0 ticks) has no power of its own
            ev.append({"name": "power", "ph": "C", "ts": ts, "pid": pid, "args": {"W": c.energy_j / c.time_s}})
        span = step_span.setdefault(c.step, [ts, ts])
        span[1] = ts + dur
    end = max((s[1] for s in step_span.values()), default=0.0)
    ev.append({"name": "power", "ph": "C", "ts": end, "pid": pid, "args": {"W": 0.0}})
    for k, (t0, t1) in step_span.items():
        ev.append({"name": f"step {k}", "cat": "step", "ph": "X", "ts": t0, "dur": t1 - t0, "pid": pid, "tid": 2,
                   "args": {"loss": trace.steps[k].get("loss"), "step_ticks": trace.steps[k]["step_ticks"]}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"board": acct.board, "model": acct.model, "energy_source": acct.source,
                          "trace_provenance": trace.provenance, "total_j": acct.total_j,
                          "note": "timestamps are board time: each step's records in order, the step's "
                                  "runtime overhead (time between records) as one event at its end"}}


def write_chrome(acct: Account, trace: Trace, board: Board, path: Path) -> None:
    # allow_nan=False: JSON has no NaN, and Perfetto refuses a file that holds one
    write_atomic(path, json.dumps(chrome_trace(acct, trace, board), separators=(",", ":"), allow_nan=False))


# ---------------------------------------------------------------- diff

def render_diff(rows: list[DiffRow], a: Account, b: Account, names: tuple[str, str], top: int | None) -> str:
    ta, tb = a.total_j / a.steps, b.total_j / b.steps
    w = max(24, *(len(r.tensor) for r in rows))
    lines = [f"energy per step of {a.model}: {names[0]} ({a.board}, {a.steps} steps) -> {names[1]} "
             f"({b.board}, {b.steps} steps), {a.source} / {b.source}",
             f"  total {fmt_j(ta).strip()} -> {fmt_j(tb).strip()}: {fmt_j(tb - ta).strip()} "
             f"({pct(tb - ta, ta).strip()})", "",
             f"  {'by kind':<14} {'A':>12} {'B':>12} {'B - A':>12}"]
    for k in KINDS:
        ea, eb = a.by_kind[k][0] / a.steps, b.by_kind[k][0] / b.steps
        lines.append(f"  {k:<14} {fmt_j(ea)} {fmt_j(eb)} {fmt_j(eb - ea)}")
    changed = sorted((r for r in rows if r.delta_j), key=lambda r: -abs(r.delta_j))
    shown = changed[:top or 10]
    lines += ["", f"  by tensor and kind, the largest changes ({len(shown)} of {len(changed)}):",
              f"  {'tensor':<{w}} {'kind':<11} {'A':>12} {'B':>12} {'B - A':>12}"]
    for r in shown:
        lines.append(f"  {r.tensor:<{w}} {r.kind:<11} {fmt_j(r.a_j)} {fmt_j(r.b_j)} {fmt_j(r.delta_j)}")
    return "\n".join(lines)


def write_diff_csv(rows: list[DiffRow], path: Path) -> None:
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["tensor", "kind", "a_j_per_step", "b_j_per_step", "delta_j_per_step"])
    for r in rows:
        w.writerow([r.tensor, r.kind, repr(r.a_j), repr(r.b_j), repr(r.delta_j)])
    write_atomic(path, f.getvalue())


def box_label(b: Box) -> str:
    return b.name + (f" (x{b.count})" if b.count > 1 else "")


# ---------------------------------------------------------------- plots (--plot)

KIND_COLORS = {"forward": "#4c72b0", "backward": "#55a868", "recompute": "#c44e52", "page_in": "#8172b2",
               "page_out": "#ccb974", "cache": "#dd8452", "optimizer": "#64b5cd", "overhead": "#999999"}


def _icicle(ax: Any, root: Box, total: float, depth: int | None) -> None:
    """The EDD as an icicle (partition) chart: each box as wide as its energy, children below it."""
    from matplotlib import colormaps

    cmap = colormaps["YlOrRd"]

    def draw(b: Box, x0: float, level: int) -> None:
        w = b.energy_j / total if total else 0.0
        ax.add_patch(_rect(x0, -level - 1, w, 1, cmap(0.15 + 0.85 * w)))
        if w > 0.03:
            ax.text(x0 + w / 2, -level - 0.5, f"{box_label(b)}\n{100 * w:.1f}%", ha="center", va="center",
                    fontsize=7, clip_on=True)
        if depth is not None and level >= depth:
            return
        x = x0
        for c in sorted(b.children.values(), key=lambda c: (-c.energy_j, c.name)):
            draw(c, x, level + 1)
            x += c.energy_j / total if total else 0.0

    draw(root, 0.0, 0)
    levels = max(lvl for lvl, _ in walk(root, depth)) + 1
    ax.set_xlim(0, 1)
    ax.set_ylim(-levels, 0)
    ax.set_yticks([-i - 0.5 for i in range(levels)], ["model"] + [f"level {i}" for i in range(1, levels)])
    ax.set_xlabel("share of the energy")


def _rect(x: float, y: float, w: float, h: float, color: Any) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, edgecolor="white", linewidth=0.8)


PLOTS = ("edd", "tensors", "power")
# A plot grows a third of an inch a bar and nearly an inch a level: 3,000 tensors drew a 12 x 1,050 inch
# canvas, 600 MB of pixels at 110 dpi, and a graph's 65,534 nodes would need 13 GB; past a few dozen bars
# or levels nothing is legible anyway. So the plots show at most this many tensors and module levels (the
# tables and the CSV hold them all), and the tensors plot's title says how many it shows.
PLOT_TOP = 50
PLOT_DEPTH = 20


def plot_paths(out: Path, stem: str) -> list[Path]:
    """The files --plot writes, in the order `plot` writes them."""
    return [out / f"{stem}.{name}.png" for name in PLOTS]


def plot(acct: Account, trace: Trace, board: Board, out: Path, stem: str, top: int = 10,
         depth: int | None = None, folded: bool = False, timeline_steps: int = 3) -> list[Path]:
    """edd.png (icicle of the module tree), tensors.png (top-N energy by kind and power), power.png.

    Every name is drawn as plain text: a node or model name is the user's (`$x$` in it would be mathtext
    to matplotlib, and a bad formula an error inside savefig), so mathtext and TeX are off throughout."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        return _plot(acct, trace, board, out, stem, min(top, PLOT_TOP),
                     PLOT_DEPTH if depth is None else min(depth, PLOT_DEPTH),
                     folded, timeline_steps)


def _plot(acct: Account, trace: Trace, board: Board, out: Path, stem: str, top: int, depth: int | None,
          folded: bool, timeline_steps: int) -> list[Path]:
    import matplotlib.pyplot as plt

    edd_png, tensors_png, power_png = plot_paths(out, stem)
    src = f"{acct.source} ({trace.provenance} trace) on {acct.board}"
    paths = []
    root = fold(edd(acct)) if folded else edd(acct)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.9 * (max(lvl for lvl, _ in walk(root, depth)) + 1)))
    _icicle(ax, root, acct.total_j, depth)
    ax.set_title(f"energy distribution of {acct.model}: {fmt_j(acct.total_j).strip()} over {acct.steps} steps, "
                 f"{src}", fontsize=9)
    paths.append(_save(fig, edd_png))

    ranked = _ranked(folded_tensors(acct) if folded else acct.tensors, top)[::-1]
    fig, (ax_e, ax_p) = plt.subplots(1, 2, figsize=(12, 1 + 0.35 * len(ranked)), sharey=True)
    names = [n for n, _ in ranked]
    left = [0.0] * len(ranked)
    for k in KINDS:
        vals = [e.kinds.get(k, 0.0) * 1e3 for _, e in ranked]
        if any(vals):
            ax_e.barh(names, vals, left=left, color=KIND_COLORS[k], label=k)
            left = [a + b for a, b in zip(left, vals, strict=True)]
    ax_e.set_xlabel("energy (mJ)")
    ax_e.legend(fontsize=7)
    ax_p.barh(names, [e.power_w * 1e3 for _, e in ranked], color="#dd8452")
    ax_p.set_xlabel("mean power while it runs (mW)")
    fig.suptitle(f"top {len(ranked)} tensors of {acct.model}, {src}", fontsize=9)
    paths.append(_save(fig, tensors_png))

    shown = [c for c in acct.charges if c.step < timeline_steps]
    fig, ax = plt.subplots(figsize=(12, 3.5))
    for k in KINDS:
        spans = [(c.start_s * 1e3, c.time_s * 1e3) for c in shown if c.kind == k and c.time_s > 0]
        if spans:
            ax.broken_barh(spans, (0, 1), facecolors=KIND_COLORS[k], alpha=0.35, label=k,
                           transform=ax.get_xaxis_transform())
    timed = [c for c in shown if c.time_s > 0]
    xs = [t for c in timed for t in (c.start_s * 1e3, (c.start_s + c.time_s) * 1e3)]
    ys = [p for c in timed for p in 2 * [c.energy_j / c.time_s * 1e3]]
    ax.plot(xs, ys, color="black", linewidth=0.8, label="power")
    ax.set_xlabel("board time (ms)")
    ax.set_ylabel("power (mW)")
    ax.set_ylim(0, max(ys, default=1.0) * 1.1)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"power of the first {min(timeline_steps, acct.steps)} of {acct.steps} steps, {src}", fontsize=9)
    paths.append(_save(fig, power_png))
    return paths


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        with atomic(path) as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------- the command

@dataclass(frozen=True)
class ReportOptions:
    """What `poet report` was asked for; poet.cli checks the flags' combinations before building it.

    csv and chrome: False for none, True for the default file (TRACE-stem.energy.csv, .chrome.json, or
    .diff.csv with `diff`, in `out` or beside the trace), or the file to write."""

    trace: Path
    by: str | None = None  # one of VIEWS; None: kinds, module tree and top tensors
    depth: int | None = None  # module tree levels below the model
    top: int | None = None  # tensors (and layers) to list
    fold: bool = False  # summarized footprint: numbered self-similar siblings folded
    csv: bool | Path = False
    chrome: bool | Path = False
    plot: bool = False
    out: Path | None = None  # where the default files go, made when something is written there
    diff: Path | None = None  # a second trace of the same graph: joules per step compared
    meter: Path | None = None  # a meter's recording: measured energy beside the modelled
    allow_gaps: bool = False  # interpolate over the recording's gaps instead of refusing it
    meter_offset_s: float = 0.0  # the meter's clock minus the host's
    markers: int | None = None  # align by the op marker on this logic input instead of host times


def _file(asked: bool | Path, default: Path) -> Path:
    return asked if isinstance(asked, Path) else default


def outputs(o: ReportOptions) -> list[tuple[str, Path]]:
    """(the option, the file) of everything `report` will write for these options."""
    out = o.out if o.out is not None else o.trace.parent
    stem = o.trace.stem
    if o.diff is not None:
        return [("--csv", _file(o.csv, out / f"{stem}.diff.csv"))] if o.csv is not False else []
    files = []
    if o.csv is not False:
        files.append(("--csv", _file(o.csv, out / f"{stem}.energy.csv")))
    if o.chrome is not False:
        files.append(("--chrome", _file(o.chrome, out / f"{stem}.chrome.json")))
    if o.plot:
        files += [("--plot", f) for f in plot_paths(out, stem)]
    return files


def inputs(o: ReportOptions) -> list[tuple[str, Path]]:
    """(what it is, the file) of everything `report` reads for these options."""
    files = [("the trace", o.trace), ("the schedule beside the trace", o.trace.with_name(SCHEDULE_BESIDE)),
             ("the suffix's schedule beside the trace", o.trace.with_name(SUFFIX_BESIDE))]
    if o.meter is not None:
        files.append(("the meter recording", o.meter))
    if o.diff is not None:
        files += [("the trace --diff compares", o.diff),
                  ("the schedule beside the --diff trace", o.diff.with_name(SCHEDULE_BESIDE)),
                  ("the suffix's schedule beside the --diff trace", o.diff.with_name(SUFFIX_BESIDE))]
    return files


def check_outputs(o: ReportOptions) -> None:
    """Refuse, before anything is read or written, an output that is one of the inputs (`--csv TRACE` would
    replace the run's trace with its own CSV), two outputs of one file, an output that is a folder or a
    device (rename would put the file in place of /dev/null), or one in a folder that does not exist."""
    outs, ins = outputs(o), inputs(o)
    existing = [(what, p) for what, p in ins if p.exists()]
    for n, (flag, f) in enumerate(outs):
        for what, p in existing:
            if same_file(f, p):
                raise UsageError(f"{flag} {f} is {what} ({p}): poet report never writes over a file it reads; "
                                 f"give another file")
        for flag2, f2 in outs[:n]:
            if same_file(f, f2):
                raise UsageError(f"{flag2} and {flag} both write {f}: give each its own file")
        try:
            mode = os.stat(f).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise UsageError(f"{flag} {f} is {kind(mode)}, not a file: give a regular file to write")
        parent = f.parent
        if not parent.is_dir() and not (o.out is not None and same_file(parent, o.out)):
            raise UsageError(f"{flag} {f}: the folder {parent} does not exist")


def report(options: ReportOptions, say: Say) -> int:
    """`poet report TRACE [--by ...] [--depth N] [--top N] [--fold] [--csv [F]] [--chrome [F]] [--plot]
    [--out DIR] [--diff B] [--meter REC [--allow-gaps] [--meter-offset S | --markers CH]]`; every refusal is a
    PoetError (one line). No output may be an input: that is refused before anything is read."""
    from poet.boards import load_board
    from poet.energy.accounting import diff

    o = options
    check_outputs(o)
    path = o.trace
    tr = Trace.load(path)
    board = load_board(tr.board)
    measured = None
    other = Trace.load(o.diff) if o.diff is not None else None  # both traces judged before any work
    if o.meter is not None:
        measured = measure(tr, board, o.meter, allow_gaps=o.allow_gaps, offset_s=o.meter_offset_s, where=str(path),
                           markers=o.markers)
        acct = account(tr, board, measured.energy_of)
    else:
        acct = account(tr, board)
    out = o.out if o.out is not None else path.parent
    if o.out is not None and outputs(o):
        out.mkdir(parents=True, exist_ok=True)
    stem = path.stem
    if other is not None:
        assert o.diff is not None
        other_acct = account(other, load_board(other.board))
        rows = diff(tr, acct, other, other_acct)
        say(render_diff(rows, acct, other_acct, (str(path), str(o.diff)), o.top))
        if o.csv is not False:
            f = _file(o.csv, out / f"{stem}.diff.csv")
            write_diff_csv(rows, f)
            say(f"wrote {f}")
        return 0
    say(render(acct, tr, board, by=o.by, depth=o.depth, top=o.top, folded=o.fold, measured=measured))
    written = []
    if o.csv is not False:
        written.append(_file(o.csv, out / f"{stem}.energy.csv"))
        write_csv(acct, written[-1])
    if o.chrome is not False:
        written.append(_file(o.chrome, out / f"{stem}.chrome.json"))
        write_chrome(acct, tr, board, written[-1])
    if o.plot:
        written += plot(acct, tr, board, out, stem, top=o.top or 10, depth=o.depth, folded=o.fold)
    for f in written:
        say(f"wrote {f}")
    return 0
