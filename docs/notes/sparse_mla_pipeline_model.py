#!/usr/bin/env python3
"""A discrete-event model of the 64-head wgmma sparse-MLA tile pipeline (docs/notes/sparse_mla.md,
session 25). Not a simulator of the GPU: a way to compare consumer schedules before spending device
time on them. Cycles per 64-token tile at the power-capped clock.

Model: the tensor pipe is one FIFO of wgmma groups (QK, and each warpgroup's half of PV); the
warpgroups are sequential programs that wait for pipe results, flags and time; the producer refills
a tile buffer once both consumer warpgroups released it: a serial copy issue, then a fixed latency.
L = issue + latency is the refill time the notes talk about.

Usage: sparse_mla_pipeline_model.py [L ...]   (default 2000 3000 4000)
"""
import sys

QK, PV_HALF, SOFTMAX, PUBLISH, LATENCY, TILES = 1152, 1024, 900, 300, 700, 64


class Pipe:
    def __init__(self):
        self.now, self.free, self.done, self.flags = 0.0, 0.0, {}, {}

    def issue(self, name, cycles):  # FIFO: starts when issued and the pipe is free
        self.free = max(self.now, self.free) + cycles
        self.done[name] = self.free
        return self.free

    def set(self, flag, when):
        self.flags[flag] = min(self.flags.get(flag, float("inf")), when)


def run(programs):
    """Each program is a generator yielding ('time', t) or ('flag', name); the one that can go on
    earliest goes next."""
    pipe = Pipe()
    gens = [p(pipe) for p in programs]
    waits = [next(g) for g in gens]
    ready = [0.0] * len(gens)
    live = set(range(len(gens)))
    while live:
        options = []
        for i in live:
            kind, arg = waits[i]
            if kind == "time":
                options.append((max(ready[i], arg), i))
            elif arg in pipe.flags:
                options.append((max(ready[i], pipe.flags[arg]), i))
        if not options:
            raise RuntimeError("deadlock: " + str([waits[i] for i in live]))
        when, i = min(options)
        pipe.now = ready[i] = when
        try:
            waits[i] = gens[i].send(when)
        except StopIteration:
            live.discard(i)
    return pipe.free / TILES


def producer(L):
    def program(pipe):
        issued = 0.0
        for k in range(TILES):
            if k >= 2:  # the buffer of tile k - 2, released by both consumer warpgroups
                yield ("flag", f"rel{k - 2}.0")
                yield ("flag", f"rel{k - 2}.1")
            issued = max(pipe.now, issued) + (L - LATENCY)
            pipe.set(f"full{k}", issued + LATENCY)
            yield ("time", issued)
    return program


def committed_wg0(pipe):  # QK, softmax, P publish, PV of O[:, 0:256]
    for k in range(TILES):
        yield ("flag", f"full{k}")
        qk = pipe.issue(f"qk{k}", QK)
        if k > 0:
            pipe.set(f"rel{k - 1}.0", pipe.done[f"pv0.{k - 1}"])
        yield ("time", qk + SOFTMAX)
        if k > 0:
            yield ("flag", f"pfree{k - 1}")
        yield ("time", pipe.now + PUBLISH)
        pipe.issue(f"pv0.{k}", PV_HALF)
        pipe.set(f"pready{k}", pipe.now)


def committed_wg1(pipe):  # PV of O[:, 256:512] once WG0 published P
    for k in range(TILES):
        yield ("flag", f"pready{k}")
        done = pipe.issue(f"pv1.{k}", PV_HALF)
        yield ("time", done)
        pipe.set(f"pfree{k}", done)
        pipe.set(f"rel{k}.1", done)


def alternate(w):  # experiment 40: warpgroup w owns the tiles k % 2 == w
    def program(pipe):
        for k in range(w, TILES, 2):
            if k >= 2:  # own PV(k - 2) done: release, and the P_lo buffer is free for tile k - 1
                yield ("time", pipe.done[f"pv{w}.{k - 2}"])
                pipe.set(f"rel{k - 2}.{w}", pipe.now)
                pipe.set(f"free{k - 1}", pipe.now)
            yield ("flag", f"full{k}")
            qk = pipe.issue(f"qk{k}", QK)
            if k >= 1:  # the other's tile k - 1
                yield ("flag", f"ready{k - 1}")
                pipe.issue(f"pv{w}.{k - 1}", PV_HALF)
            yield ("time", qk)
            yield ("time", pipe.now + SOFTMAX)
            if k >= 1:
                yield ("time", pipe.done[f"pv{w}.{k - 1}"])
                pipe.set(f"rel{k - 1}.{w}", pipe.now)
                yield ("flag", f"free{k}")
            yield ("time", pipe.now + PUBLISH)
            pipe.set(f"ready{k}", pipe.now)
            pipe.issue(f"pv{w}.{k}", PV_HALF)
        last = TILES - 1
        if last % 2 != w:
            yield ("time", pipe.done[f"pv{w}.{last - 1}"])
            pipe.set(f"rel{last - 1}.{w}", pipe.now)
            pipe.set(f"free{last}", pipe.now)
            yield ("flag", f"ready{last}")
            yield ("time", pipe.issue(f"pv{w}.{last}", PV_HALF))
    return program


if __name__ == "__main__":
    for L in [float(a) for a in sys.argv[1:]] or [2000.0, 3000.0, 4000.0]:
        committed = run([producer(L), committed_wg0, committed_wg1])
        alt = run([producer(L), alternate(0), alternate(1)])
        print(f"L {L:5.0f}: committed {committed:5.0f}, alternate owners {alt:5.0f} cycles a tile "
              f"(tensor work {QK + 2 * PV_HALF})")
