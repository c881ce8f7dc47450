#!/usr/bin/env python3
"""Splits a speculative_sweep top-k kernel's SASS into the phases of its row and lists its loops.

    SASS_LINEINFO=1 JOBS=1 scripts/compare_sass.sh record DIR speculative
    scripts/sass_phases.py DIR topk.plain.bf16.t512.speculative_sweep [--counts NCU_SOURCE.csv [--stalls]]

Each instruction's phase is that of the kernel-body line it was inlined into (the outermost line of
nvdisasm's inline chain), cut at the markers below; out-of-line blocks keep the phase of the code
that calls them. Printed: static instructions a phase, and every loop (a backward branch) with its
body's size, key opcodes and phase. --counts: a CSV of per-instruction figures, e.g.
`ncu --import R.ncu-rep --page source --print-source sass --csv`, with an address column
(offsets, or absolute addresses from the kernel's first instruction); every numeric column is
summed by phase. --stalls: only the executed instructions, and the stall samples (ncu's stall_*
columns) of each phase in groups, as a share of the phase's samples.
"""
import collections
import csv
import re
import sys

# (phase, text of the kernel body's first line of that phase), in source order (templates/topk.cuh).
MARKERS = [
    ("prologue", "const int C = kTopkClustered"),
    ("sample", "if (may_speculate) {"),
    ("sweep", "if (bound != 0u) {  // uniform"),
    ("zero_ties", "  if (zero_ties) {"),
    ("selection", "} else if (speculated) {"),
    ("exact", "// Pass 0: load the slice"),
    ("compaction", "const uint32_t threshold = x.prefix;  // the topk-th largest key"),
    ("output", "for (int i0 = 0; speculated && i0 < warp_fill"),
    ("zero_ties_output", "topk_write_zero_ties(s, b, round_begin"),
    ("exact_output", "for (int w0 = 4 * round_begin; !speculated"),
    ("stage", "  if (stage) {"),
]
KEY_OPS = ["LDG", "STG", "LDS", "STS", "ATOMS", "BAR", "VOTE", "SHFL", "HSET2", "FSETP", "POPC", "FLO", "BRA"]


def opcode(text):
    return re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0]


def parse_listing(path):
    """[(address, text, [line, inlined at, ...])] and {label: index} from `nvdisasm -gi -c`."""
    ins, labels, chain, in_comments = [], {}, [], False
    for line in open(path):
        m = re.match(r'\s*//## File "[^"]*", line (\d+)(.*)', line)
        if m:  # one comment a frame: "line A inlined at B", then "line B inlined at C", ... "line Z"
            frames = [int(m.group(1))] + [int(x) for x in re.findall(r"line (\d+)", m.group(2))]
            chain = (chain + [f for f in frames if f not in chain]) if in_comments else frames
            in_comments = True
            continue
        m = re.match(r"(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2), chain))
            in_comments = False
    return ins, labels


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    d, key = sys.argv[1], sys.argv[2]
    counts = sys.argv[sys.argv.index("--counts") + 1] if "--counts" in sys.argv else None
    stalls = "--stalls" in sys.argv
    src = open(f"{d}/{key}.cu").read().split("\n")
    kernel = next(i for i, l in enumerate(src, 1) if "__global__" in l and "nsajit_topk" in l)
    starts = []
    for name, text in MARKERS:
        line = next((i for i, l in enumerate(src, 1) if i > kernel and text in l), None)
        if line is None:
            sys.exit(f"marker not found: {text!r}")
        starts.append((line, name))
    starts.sort()

    def phase_of_line(line):
        name = "entry"
        for start, n in starts:
            if line >= start:
                name = n
        return name

    ins, labels = parse_listing(f"{d}/{key}.li")
    phases, prev = [], "entry"
    for a, t, chain in ins:
        outer = chain[-1] if chain else 0
        prev = phase_of_line(outer) if outer > kernel else prev
        phases.append(prev)
    static = collections.Counter(phases)
    order = ["entry"] + [n for _, n in starts]
    print(f"{key}: {len(ins)} instructions")
    print("static instructions by phase: " + ", ".join(f"{n} {static[n]}" for n in order if static[n]))
    print("loops (backward branches): start-end, body size, key opcodes, phase")
    for i, (a, t, chain) in enumerate(ins):
        m = re.search(r"BRA\s+(?:!?U?P[T0-9],\s*)?`?\(?(\.L_x_\d+)\)?", t)
        if not (m and opcode(t).startswith("BRA")):
            continue
        j = labels[m.group(1)]
        if j > i or i - j > 2000:  # forward, or an out-of-line block returning: not a loop
            continue
        ops = collections.Counter(opcode(x).split(".")[0] for _, x, _ in ins[j:i + 1])
        print(f"  {ins[j][0]:#07x}-{a:#07x} {i - j + 1:5d}  " +
              " ".join(f"{k}{ops[k]}" for k in KEY_OPS if ops[k]) + f"  [{phases[j]}]")
    if counts:
        address_phase = {a: p for (a, _, _), p in zip(ins, phases)}
        rows = list(csv.reader(open(counts)))
        head = next(i for i, r in enumerate(rows) if any("Address" in c for c in r))
        cols = rows[head]
        ac = next(i for i, c in enumerate(cols) if "Address" in c)
        data = []
        for r in rows[head + 1:]:
            try:
                data.append((int(r[ac], 16), r))
            except (ValueError, IndexError):
                pass
        base = min(a for a, _ in data) if data and min(a for a, _ in data) > ins[-1][0] else 0
        sums = collections.defaultdict(lambda: collections.Counter())
        for a, r in data:
            p = address_phase.get(a - base, "unmapped")
            for i, c in enumerate(r):
                if i == ac:
                    continue
                try:
                    sums[cols[i]][p] += float(c.replace(",", ""))
                except ValueError:
                    pass
        for col, by in sums.items():
            total = sum(by.values())
            if total and (not stalls or col == "Instructions Executed"):
                print(f"{col}: " + ", ".join(f"{n} {by[n]:.0f} ({100 * by[n] / total:.1f} %)"
                                               for n in order + ["unmapped"] if by[n]))
        if stalls:  # ncu's stall_* columns (all samples), grouped, as % of each phase's samples
            groups = [("long_sb", ["long_sb"]), ("short_sb+mio", ["short_sb", "mio"]), ("barrier", ["barrier"]),
                      ("wait", ["wait"]), ("issue", ["selected", "not_selected", "dispatch", "math"]),
                      ("branch", ["branch_resolving"])]
            cols = {c[len("stall_"):]: by for c, by in sums.items()
                    if c.startswith("stall_") and "Not Issued" not in c}
            samples = collections.Counter()
            for by in cols.values():
                samples.update(by)
            total = sum(samples.values())
            print(f"{'phase':16} {'samples %':>9}  " + " ".join(f"{g:>12}" for g, _ in groups) + "  (issue: "
                  "selected + not_selected + dispatch + math_pipe_throttle)")
            for n in order + ["unmapped"]:
                if samples[n]:
                    print(f"{n:16} {100 * samples[n] / total:9.1f}  " +
                          " ".join(f"{100 * sum(cols.get(c, {}).get(n, 0) for c in cs) / samples[n]:12.1f}"
                                   for _, cs in groups))


if __name__ == "__main__":
    main()
