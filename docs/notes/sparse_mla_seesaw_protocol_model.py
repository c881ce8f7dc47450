# sparse_mla_seesaw_protocol_model.py — random interleavings of templates/sparse_mla_seesaw.cuh's
# barrier protocol at warpgroup granularity: the producer's cp.async halves (landing at random
# times, cp.async.mbarrier.arrive firing once every earlier copy of the thread landed), the
# full / empty mbarriers (phase parity waits), the named barriers (a warpgroup arriving twice in
# one generation is an error) and the wgmma groups (reads at random times up to wait_group).
# Checks: no deadlock; every read (and every wgmma operand, at issue and when read) sees the
# intended pair's data; no copy (issued or landing) or store to a region an in-flight wgmma still reads.
# Sequentially consistent: proxy fences and memory ordering are not modelled.
#   python3 docs/notes/sparse_mla_seesaw_protocol_model.py [SEEDS] [--mutations]   # prints "failures 0"
# --mutations first runs each mutation in MUTATIONS (each must fail some runs).
import random, sys

# Mutations (--mutations): each must make some runs fail, else the model does not check that rule.
MUT = set()

# One generator per warpgroup, mirroring the kernel's order of operations for P pairs.
def producer(P):
    yield ('copy', 'Q', 'q')
    for i in range(P):
        par = (i - 1) & 1
        if i > 0: yield ('wait', 'E_L0', par)
        yield ('write', 'valid0', i)
        yield ('copy', 'L0', (i, 'kv'))
        yield ('async_arrive', 'F_L0'); yield ('arrive', 'F_L0')
        if i > 0: yield ('wait', 'E_H1', par)
        yield ('write', 'valid1', i)
        yield ('copy', 'H1s', (i, 'kv')); yield ('copy', 'H1r', (i, 'kv'))
        yield ('async_arrive', 'F_H1'); yield ('arrive', 'F_H1')
        if i > 0: yield ('wait', 'E_H0', par)
        yield ('copy', 'H0s', (i, 'kv')); yield ('copy', 'H0r', (i, 'kv'))
        yield ('async_arrive', 'F_H0')
        if i > 0: yield ('wait', 'E_L1', par)
        yield ('copy', 'L1', (i, 'kv'))
        yield ('async_arrive', 'F_L1')
    yield ('wait_copies',)

# P1: its own buffer ('P1buf'); with 'p1_in_h1' over H1's rope subtile as in the first version
# (then EMPTY_H1, arrived by WG1 alone, frees H1 while WG0's SS PV may still read P1: must fail).
def p1_region():
    return 'H1r' if 'p1_in_h1' in MUT else 'P1buf'

def wg0(P):
    for i in range(P):
        par = i & 1
        yield ('wait', 'F_L0', par)
        yield ('mma', [('Q', 'q'), ('L0', (i, 'kv'))])
        yield ('wait', 'F_H0', par)
        yield ('mma', [('H0s', (i, 'kv')), ('H0r', (i, 'kv'))]); yield ('commit',); yield ('mwait', 0)
        yield ('read', 'valid0', i)
        yield ('write', 'max0', i); yield ('bar_arrive', 'MAX0')
        yield ('mma', [('L0', (i, 'kv'))]); yield ('commit',)          # RS PV P0 V0_L
        if 'skip_max1' not in MUT: yield ('bar_sync', 'MAX1')
        yield ('read', 'max1', i)
        yield ('mwait', 0); yield ('arrive', 'E_L0')
        yield ('write', 'H0r', (i, 'P')); yield ('bar_arrive', 'P0')
        yield ('wait', 'F_L1', par)
        yield ('bar_sync', 'P1')
        yield ('mma', [('L1', (i, 'kv')), (p1_region(), (i, 'P'))]); yield ('commit',)  # SS PV P1 V1_L
        yield ('mwait', 1 if 'wg0_no_ss_wait' in MUT else 0)
        yield ('arrive', 'E_L1')
    yield ('write', 'sum0', 1); yield ('bar_sync', 'EPI'); yield ('read', 'sum1', 1)

def wg1(P):
    for i in range(P):
        par = i & 1
        yield ('wait', 'F_H1', par)
        yield ('mma', [('Q', 'q'), ('H1s', (i, 'kv')), ('H1r', (i, 'kv'))])
        if 'p1_before_full_l1' in MUT: yield ('write', p1_region(), (i, 'early'))
        yield ('wait', 'F_L1', par)
        yield ('mma', [('L1', (i, 'kv'))]); yield ('commit',); yield ('mwait', 0)
        yield ('read', 'valid1', i)
        yield ('bar_sync', 'MAX0'); yield ('read', 'max0', i); yield ('write', 'max1', i); yield ('bar_arrive', 'MAX1')
        yield ('write', p1_region(), (i, 'P')); yield ('bar_arrive', 'P1')
        yield ('mma', [('H1s', (i, 'kv'))]); yield ('commit',)           # RS PV P1 V1_R
        yield ('wait', 'F_H0', par)
        if 'skip_p0_ready' not in MUT: yield ('bar_sync', 'P0')
        yield ('mma', [('H0s', (i, 'kv')), ('H0r', (i, 'P'))]); yield ('commit',)  # SS PV P0 V0_R
        yield ('mwait', 2 if 'wg1_h1_early' in MUT else 1); yield ('arrive', 'E_H1')
        yield ('mwait', 1 if 'wg1_h0_early' in MUT else 0); yield ('arrive', 'E_H0')
    yield ('write', 'sum1', 1); yield ('bar_sync', 'EPI'); yield ('read', 'sum0', 1)

COUNTS = {'F_L0': 2, 'F_H0': 1, 'F_H1': 2, 'F_L1': 1, 'E_L0': 1, 'E_H0': 1, 'E_L1': 1, 'E_H1': 1}

def run(P, seed):
    rng = random.Random(seed)
    slow = {'mma_progress': rng.choice([1.0, 0.3, 0.05]), 'land': rng.choice([1.0, 0.3, 0.05])}
    mem = {}
    pend_copy = {}          # id -> (region, value)
    async_arr = []          # (barrier, set of copy ids issued before it)
    next_id = [0]
    mb = {k: [0, 0] for k in COUNTS}   # phase, arrivals
    nb = {k: [] for k in ['MAX0', 'MAX1', 'P0', 'P1', 'EPI']}
    agents = {'prod': producer(P), 'wg0': wg0(P), 'wg1': wg1(P)}
    cur = {a: next(g) for a, g in agents.items()}
    groups = {'wg0': [], 'wg1': []}
    open_grp = {'wg0': [], 'wg1': []}
    blocked = {}
    errors = []
    def mb_arrive(b):
        mb[b][1] += 1
        if mb[b][1] == COUNTS[b]: mb[b][0] += 1; mb[b][1] = 0
    def check_read(who, reg, val):
        if any(r == reg for r, _ in pend_copy.values()): errors.append(f'{who} reads {reg} while a copy to it is in flight')
        if mem.get(reg) != val: errors.append(f'{who} reads {reg}: has {mem.get(reg)}, expected {val}')
    def check_write(who, reg):
        for a in groups:
            for g in groups[a] + [open_grp[a]]:
                for r, v in g:
                    if r == reg: errors.append(f'{who} writes {reg} while {a} wgmma reads it ({v})')
    def advance(a):
        try: cur[a] = next(agents[a])
        except StopIteration: cur[a] = None
    steps = 0
    while not errors:
        steps += 1
        if steps > 200000: errors.append('livelock'); break
        # async arrivals whose copies all landed
        still = []
        for bname, ids in async_arr:
            if ids & pend_copy.keys(): still.append((bname, ids))
            else: mb_arrive(bname)
        async_arr[:] = still
        choices = []
        if pend_copy: choices.append('land')
        if any(groups.values()): choices.append('mma_progress')
        for a, op in cur.items():
            if op is None or a in blocked: continue
            k = op[0]
            if k == 'wait' and (mb[op[1]][0] & 1) == op[2]: continue
            if k == 'mwait' and len(groups[a]) > op[1]: continue
            if k == 'wait_copies' and pend_copy: continue
            choices.append(a)
        if not choices:
            if all(op is None for op in cur.values()): break
            errors.append('deadlock: ' + str(cur) + ' ' + str(mb) + ' blocked ' + str(blocked)); break
        c = rng.choice(choices)
        # slow wgmmas / copies in some runs (a rate a run), so long in-flight windows get played
        if c in slow and len(choices) > 1 and rng.random() > slow[c]:
            c = rng.choice([x for x in choices if x != c])
        if c == 'land':
            cid = rng.choice(list(pend_copy))
            reg, val = pend_copy.pop(cid)
            check_write('copy', reg)
            mem[reg] = val
            continue
        if c == 'mma_progress':
            a = rng.choice([x for x in groups if groups[x]])
            g = groups[a][0]
            if g:
                r, v = g.pop(rng.randrange(len(g)))
                check_read(a + ' wgmma', r, v)
            else:
                groups[a].pop(0)
            continue
        a = c; op = cur[a]; k = op[0]
        if k == 'copy':  # issued under an in-flight wgmma read is a race whenever it lands
            check_write(a + ' copy issue', op[1])
            pend_copy[next_id[0]] = (op[1], op[2]); next_id[0] += 1
        elif k == 'async_arrive':
            async_arr.append((op[1], set(pend_copy.keys())))
        elif k == 'arrive': mb_arrive(op[1])
        elif k == 'write':
            if any(r == op[1] for r, _ in pend_copy.values()): errors.append(f'{a} writes {op[1]} while a copy to it is in flight')
            check_write(a, op[1]); mem[op[1]] = op[2]
        elif k == 'read': check_read(a, op[1], op[2])
        elif k == 'mma':
            for r, v in op[1]: check_read(a + ' wgmma issue', r, v)
            open_grp[a] += list(op[1])
        elif k == 'commit':
            groups[a].append(open_grp[a]); open_grp[a] = []
        elif k in ('bar_arrive', 'bar_sync'):
            b = op[1]
            if a in nb[b]: errors.append(f'{a} arrives twice on {b} in one generation')
            nb[b].append(a)
            if k == 'bar_sync': blocked[a] = b
            if len(nb[b]) == 2:
                for x in nb[b]:
                    if blocked.get(x) == b: del blocked[x]
                nb[b] = []
        advance(a)
    return errors

MUTATIONS = {
    'wg0_no_ss_wait': 'WG0 releases L1 (and the P1 buffer) before its SS PV completed',
    'wg1_h1_early': 'WG1 releases H1 before its RS PV completed',
    'wg1_h0_early': 'WG1 releases H0 before its SS PV completed',
    'p1_in_h1': 'P1 over H1\'s rope subtile with EMPTY_H1 arrived by WG1 alone',
    'p1_before_full_l1': 'WG1 writes the P1 buffer before its FULL_L1 wait (the buffer\'s only guard)',
    'skip_p0_ready': 'WG1 skips P0_READY',
    'skip_max1': 'WG0 skips MAX1',
}

def sweep(seeds, pair_counts=(1, 2, 3, 4, 7)):
    bad, first = 0, []
    for P in pair_counts:
        for seed in range(seeds):
            e = run(P, seed)
            if e:
                bad += 1
                if len(first) < 3: first.append(('pairs', P, 'seed', seed, e[:2]))
    return bad, first

if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    seeds = int(args[0]) if args else 2000
    if '--mutations' in sys.argv:
        for m, what in MUTATIONS.items():
            MUT.clear(); MUT.update(m.split('+'))
            bad, first = sweep(seeds, (2, 3, 4))
            print(f'{m}: {bad} of {3 * seeds} runs fail ({what})' + (f'; first: {first[0]}' if first else ''))
        MUT.clear()
    bad, first = sweep(seeds)
    for f in first: print(*f)
    print('failures', bad)
