# sparse_mla_deferred_protocol_model.py — random interleavings of the barrier protocol of the
# deferred-PV schedule (designed, not built: docs/notes/sparse_mla.md, "Analysed, not built: the
# single schedule's softmax gap, revisited under bf16 P") at warpgroup granularity: the producer's
# cp.async halves L / R of a buffer (landing at random times, cp.async.mbarrier.arrive.noinc firing
# once every earlier copy of the thread landed), the FULL / EMPTY mbarriers (phase parity waits),
# the named barriers (a warpgroup arriving twice in one generation is an error) and the wgmma
# groups of WG0 and WG1, executed in issue order on one shared tensor pipe (a FIFO across both),
# each operand read at a random time while its wgmma executes.
# Checks: no deadlock; every read (and every wgmma operand, at issue and when read) sees the
# intended tile's data; no copy (issued or landing) or store to a region an in-flight wgmma still reads.
# Sequentially consistent: proxy fences and memory ordering are not modelled.
#   python3 docs/notes/sparse_mla_deferred_protocol_model.py [SEEDS] [--mutations] [--any-order]   # "failures 0"
# --mutations first runs each mutation in MUTATIONS (each must fail some runs) and each variant in
# SAFE (each must fail none: a barrier the rest of the protocol already implies).
import random, sys

# Mutations (--mutations): each must make some runs fail, else the model does not check that rule.
MUT = set()
# --any-order: wgmmas execute in any order (not one FIFO), to show no check relies on the FIFO.
ANY_ORDER = '--any-order' in sys.argv

# Buffer b = k & 1: L{b} = subtiles 0-3 (K and V dims 0-255), Rs{b} = subtiles 4-7 (V right), Rr{b} =
# subtile 8 (rope; P(k) once QK(k) is done). One generator per warpgroup, in the kernel's order.
def producer(T):
    yield ('copy', 'Q', 'q'); yield ('async_arrive', 'Qb')
    for k in range(T):
        b, par = k & 1, ((k >> 1) - 1) & 1
        if 'valid_early' in MUT: yield ('write', f'valid{b}', k)
        if k >= 2: yield ('wait', f'EL{b}', par)
        if 'valid_early' not in MUT: yield ('write', f'valid{b}', k)
        yield ('copy', f'L{b}', (k, 'kv'))
        yield ('async_arrive', f'FL{b}'); yield ('arrive', f'FL{b}')   # noinc + the plain arrival that releases valid
        if k >= 2: yield ('wait', f'ER{b}', par)
        yield ('copy', f'Rs{b}', (k, 'kv')); yield ('copy', f'Rr{b}', (k, 'kv'))
        yield ('async_arrive', f'FR{b}')
    yield ('wait_copies',)

def wg0(T):
    yield ('wait', 'Qb', 0)
    for k in range(T):
        b, par = k & 1, (k >> 1) & 1
        released = False
        # today's vote: tile k's left half not landed -> finish PV_L(k-1) and free its left half first
        if k > 0 and not (yield ('test', f'FL{b}', par)):
            if 'wg0_l_early' not in MUT: yield ('mwait', 0)
            yield ('arrive', f'EL{b ^ 1}'); released = True
        yield ('wait', f'FL{b}', par)
        yield ('mma', [('Q', 'q'), (f'L{b}', (k, 'kv'))])                   # QK steps 0-15
        yield ('wait', f'FR{b}', par)
        yield ('mma', [(f'Rs{b}', (k, 'kv')), (f'Rr{b}', (k, 'kv'))]); yield ('commit',)  # steps 16-35
        if k > 0 and 'no_qk_issued' not in MUT: yield ('bar_arrive', 'QK_ISSUED')
        if k > 0 and not released:
            if 'wg0_l_early' not in MUT: yield ('mwait', 1)                # PV_L(k-1) done
            yield ('arrive', f'EL{b ^ 1}')
        yield ('mwait', 0)
        yield ('read', f'valid{b}', k)                                      # softmax(k)
        if k > 0 and 'no_p_free' not in MUT: yield ('bar_sync', 'P_FREE')
        yield ('write', f'Rr{b}', (k, 'P')); yield ('write', 'alpha', k)
        yield ('mma', [(f'L{b}', (k, 'kv'))]); yield ('commit',)           # PV_L(k), RS: P from registers
        if 'no_p_ready' not in MUT: yield ('bar_arrive', 'P_READY')
    if 'no_qk_issued' not in MUT: yield ('bar_arrive', 'QK_ISSUED')        # WG1 syncs it once a tile
    yield ('mwait', 0)
    yield ('write', 'invl', 1); yield ('bar_arrive', 'EPI')

def wg1(T):
    for k in range(T):
        b, par = k & 1, (k >> 1) & 1
        yield ('wait', f'FR{b}', par)
        if 'no_p_ready' not in MUT: yield ('bar_sync', 'P_READY')
        if 'no_qk_issued' not in MUT: yield ('bar_sync', 'QK_ISSUED')      # QK(k+1) ahead of PV_R(k) in the pipe
        yield ('read', 'alpha', k)
        if k + 1 < T and 'no_p_free' not in MUT: yield ('bar_arrive', 'P_FREE')
        yield ('mma', [(f'Rr{b}', (k, 'P')), (f'Rs{b}', (k, 'kv'))]); yield ('commit',)  # PV_R(k), SS
        if 'wg1_r_next_tile' in MUT:   # release of tile k-1's right half deferred past QK_ISSUED(k+1)
            if k > 0: yield ('mwait', 1); yield ('arrive', f'ER{b ^ 1}')
            continue
        if 'wg1_r_early' in MUT: yield ('arrive', f'ER{b}'); yield ('mwait', 0)
        else: yield ('mwait', 0); yield ('arrive', f'ER{b}')
    if 'wg1_r_next_tile' in MUT: yield ('mwait', 0); yield ('arrive', f'ER{(T - 1) & 1}')
    yield ('bar_sync', 'EPI'); yield ('read', 'invl', 1)

COUNTS = {'Qb': 1, 'FL0': 2, 'FL1': 2, 'FR0': 1, 'FR1': 1, 'EL0': 1, 'EL1': 1, 'ER0': 1, 'ER1': 1}

def run(T, seed):
    rng = random.Random(seed)
    slow = {c: rng.choice([1.0, 0.3, 0.05]) for c in ('mma_progress', 'land')}
    slow.update({c: rng.choice([1.0, 1.0, 0.3, 0.05]) for c in ('prod', 'wg0', 'wg1')})
    mem = {}
    pend_copy = {}          # id -> (region, value)
    async_arr = []          # (barrier, set of copy ids issued before it)
    next_id = [0]
    mb = {x: [0, 0] for x in COUNTS}   # phase, arrivals
    nb = {x: [] for x in ['QK_ISSUED', 'P_FREE', 'P_READY', 'EPI']}
    agents = {'prod': producer(T), 'wg0': wg0(T), 'wg1': wg1(T)}
    cur = {a: next(g) for a, g in agents.items()}
    pipe = []               # the tensor pipe, in issue order: [owner, group number, reads left]
    committed = {'wg0': 0, 'wg1': 0}
    blocked = {}
    errors = []
    def mb_arrive(x):
        mb[x][1] += 1
        if mb[x][1] == COUNTS[x]: mb[x][0] += 1; mb[x][1] = 0
    def done(x, par): return (mb[x][0] & 1) != par     # phase of parity par completed
    # wgmma.wait_group n: every group of the warpgroup but the n most recently committed complete
    def groups_left(a, n): return any(e[0] == a and e[1] < committed[a] - n for e in pipe)
    def check_read(who, reg, val):
        if any(r == reg for r, _ in pend_copy.values()): errors.append(f'{who} reads {reg} while a copy to it is in flight')
        if mem.get(reg) != val: errors.append(f'{who} reads {reg}: has {mem.get(reg)}, expected {val}')
    def check_write(who, reg):
        for o, _, reads in pipe:
            for r, v in reads:
                if r == reg: errors.append(f'{who} writes {reg} while {o} wgmma reads it ({v})')
    def advance(a, val=None):
        try: cur[a] = agents[a].send(val)
        except StopIteration: cur[a] = None
    steps = 0
    while not errors:
        steps += 1
        if steps > 200000: errors.append('livelock'); break
        # async arrivals whose copies all landed
        still = []
        for x, ids in async_arr:
            if ids & pend_copy.keys(): still.append((x, ids))
            else: mb_arrive(x)
        async_arr[:] = still
        choices = []
        if pend_copy: choices.append('land')
        if pipe: choices.append('mma_progress')
        for a, op in cur.items():
            if op is None or a in blocked: continue
            k = op[0]
            if k == 'wait' and not done(op[1], op[2]): continue
            if k == 'mwait' and groups_left(a, op[1]): continue
            if k == 'wait_copies' and (pend_copy or async_arr): continue
            choices.append(a)
        if not choices:
            if all(op is None for op in cur.values()): break
            errors.append('deadlock: ' + str(cur) + ' ' + str(mb) + ' blocked ' + str(blocked)); break
        c = rng.choice(choices)
        # slow wgmmas / copies / warpgroups in some runs (a rate a run), so long windows get played
        if c in slow and len(choices) > 1 and rng.random() > slow[c]:
            c = rng.choice([x for x in choices if x != c])
        if c == 'land':
            cid = rng.choice(list(pend_copy))
            reg, val = pend_copy.pop(cid)
            check_write('copy', reg)
            mem[reg] = val
            continue
        if c == 'mma_progress':   # only the pipe's head executes (any wgmma: --any-order): a read, or it retires
            i = rng.randrange(len(pipe)) if ANY_ORDER else 0
            reads = pipe[i][2]
            if reads:
                r, v = reads.pop(rng.randrange(len(reads)))
                check_read(pipe[i][0] + ' wgmma', r, v)
            else:
                pipe.pop(i)
            continue
        a = c; op = cur[a]; k = op[0]; val = None
        if k == 'copy':  # issued under an in-flight wgmma read is a race whenever it lands
            check_write(a + ' copy issue', op[1])
            pend_copy[next_id[0]] = (op[1], op[2]); next_id[0] += 1
        elif k == 'async_arrive':
            async_arr.append((op[1], set(pend_copy.keys())))
        elif k == 'arrive': mb_arrive(op[1])
        elif k == 'test': val = done(op[1], op[2])
        elif k == 'write':
            if any(r == op[1] for r, _ in pend_copy.values()): errors.append(f'{a} writes {op[1]} while a copy to it is in flight')
            check_write(a, op[1]); mem[op[1]] = op[2]
        elif k == 'read': check_read(a, op[1], op[2])
        elif k == 'mma':  # enters the pipe at issue, in the group the next commit closes
            for r, v in op[1]: check_read(a + ' wgmma issue', r, v)
            pipe.append([a, committed[a], list(op[1])])
        elif k == 'commit': committed[a] += 1
        elif k in ('bar_arrive', 'bar_sync'):
            x = op[1]
            if a in nb[x]: errors.append(f'{a} arrives twice on {x} in one generation')
            nb[x].append(a)
            if k == 'bar_sync': blocked[a] = x
            if len(nb[x]) == 2:
                for y in nb[x]:
                    if blocked.get(y) == x: del blocked[y]
                nb[x] = []
        advance(a, val)
    return errors

MUTATIONS = {
    'wg1_r_early': 'WG1 releases EMPTY_R[b] before its PV_R(k) completed',
    'wg1_r_next_tile': 'WG1 releases EMPTY_R of tile k at tile k+1 (after QK_ISSUED(k+2)): deadlock',
    'wg0_l_early': 'WG0 releases EMPTY_L[b^1] before PV_L(k-1) completed (both paths)',
    'no_p_free': 'no P_FREE (alpha(k) overwritten by alpha(k+1) before WG1 read it)',
    'no_p_ready+no_qk_issued': 'neither P_READY nor QK_ISSUED (WG1 reads alpha / P before WG0 wrote them)',
    'valid_early': 'the producer writes valid[b] before waiting EMPTY_L[b]',
}
# Variants that must not fail: P_READY(k) precedes QK_ISSUED(k+1) in WG0's order (and the last
# P_READY the extra QK_ISSUED after the loop), so either barrier alone orders P(k) / alpha(k).
SAFE = {
    'no_qk_issued': 'WG1 does not wait for QK(k+1) to be issued (schedule only)',
    'no_p_ready': 'no P_READY: QK_ISSUED(k+1) already orders P(k) and alpha(k)',
}

def sweep(seeds, tile_counts=range(1, 8)):
    bad, first = 0, []
    for T in tile_counts:
        for seed in range(seeds):
            e = run(T, seed)
            if e:
                bad += 1
                if len(first) < 3: first.append(('tiles', T, 'seed', seed, e[:2]))
    return bad, first

if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    seeds = int(args[0]) if args else 2000
    if '--mutations' in sys.argv:
        for kind, table in (('mutation', MUTATIONS), ('safe', SAFE)):
            for m, what in table.items():
                MUT.clear(); MUT.update(m.split('+'))
                bad, first = sweep(seeds, (2, 3, 4))
                print(f'{kind} {m}: {bad} of {3 * seeds} runs fail ({what})' + (f'; first: {first[0]}' if first else ''))
        MUT.clear()
    bad, first = sweep(seeds)
    for f in first: print(*f)
    print('failures', bad)
