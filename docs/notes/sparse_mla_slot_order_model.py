"""An L2 model of prefill's KV gather over a large pool, random against slot order.

Question (sparse_mla.md, "Thirtieth session"): if each row's 2,048 indices were gathered in slot
order, would a wave's CTAs hit each other's lines in L2 often enough to matter at skv 262,144?
Model: one CTA an SM (132), each row a CTA, 32 tiles of 64 slots; a tile takes a unit of time with
multiplicative jitter (so CTAs drift apart as they would); the L2 is an LRU of whole KV rows (1,152
bytes each, a bf16 row) of the given capacity, shared by every SM. Counts the fraction of gathered
rows that miss. Pure model: no GPU. Run: python3 docs/notes/sparse_mla_slot_order_model.py
"""
import heapq
import random
from collections import OrderedDict


def simulate(order, rows=1024, sms=132, topk=2048, tile=64, pool=262144, l2_mb=50.0, jitter=0.05, sm_spread=0.0, seed=1):
    rng = random.Random(seed)
    speed = [rng.lognormvariate(0.0, sm_spread) for _ in range(sms)]  # persistent per-SM rate
    capacity = int(l2_mb * 2**20 / 1152)
    l2 = OrderedDict()
    misses = gathers = 0
    events = []  # (time, sm, row, next tile)
    next_row = 0
    for sm in range(min(sms, rows)):
        heapq.heappush(events, (0.0, sm, next_row, 0))
        next_row += 1
    row_slots = {}

    def slots_of(r, t):
        s = [rng.randrange(pool) for _ in range(topk)]
        if order == "clock":  # slot order, cyclic from the range a global clock points at (period: one CTA)
            period = topk // tile
            shift = pool.bit_length() - 1 - 4
            start = int((t % period) / period * 16)
            s.sort(key=lambda x: ((x >> shift) - start) % 16)
        elif order == "sorted":
            s.sort()
        elif order == "buckets16":
            shift = pool.bit_length() - 1 - 4
            rng.shuffle(s)
            s.sort(key=lambda x: x >> shift)  # stable: random inside each of 16 ranges
        return s

    while events:
        t, sm, r, k = heapq.heappop(events)
        if k == 0:
            row_slots[r] = slots_of(r, t)
        for slot in row_slots[r][k * tile:(k + 1) * tile]:
            gathers += 1
            if slot in l2:
                l2.move_to_end(slot)
            else:
                misses += 1
                l2[slot] = True
                if len(l2) > capacity:
                    l2.popitem(last=False)
        t += speed[sm] * rng.lognormvariate(0.0, jitter)
        if k + 1 < topk // tile:
            heapq.heappush(events, (t, sm, r, k + 1))
        else:
            del row_slots[r]
            if next_row < rows:
                heapq.heappush(events, (t, sm, next_row, 0))
                next_row += 1
    return misses / gathers


if __name__ == "__main__":
    # The bench's 4,096 rows are 31 waves; per-SM spread: SMs whose CTAs run persistently faster or
    # slower (L2 partition distance, clocks), which desynchronises the waves as they go.
    for l2_mb, jitter, spread in ((50.0, 0.05, 0.0), (50.0, 0.05, 0.03), (50.0, 0.05, 0.10), (25.0, 0.05, 0.03), (25.0, 0.10, 0.10)):
        line = [f"L2 {l2_mb:.0f} MB, tile jitter {jitter:.0%}, SM spread {spread:.0%}:"]
        for order in ("random", "sorted", "clock"):
            line.append(f"{order} {simulate(order, rows=4096, l2_mb=l2_mb, jitter=jitter, sm_spread=spread):.3f}")
        print(" ".join(line), flush=True)
