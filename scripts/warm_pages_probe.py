# warm_pages_probe.py: is a page walk on the small decode calls' critical path? The split kernel's
# first KV tile lands 3.5-4.9 us after entry where the index and the row, two cold DRAM trips, take
# ~1.5 (docs/notes/sparse_mla.md, "Twenty-fifth session"); the row's address is known only once
# its index arrives, so a translation miss would add a third step to that chain. Same call, same
# data, each after the benches' 256 MB L2 flush: "bench" as the benches time it; "thrashed" with
# one byte of each 2 MB page of a 16 GB buffer read from every SM after the flush (the pool's
# translations evicted); "thrashed+warm" with the pool's pages then read from every SM too
# (translations loaded, the rows' lines still cold). thrashed - bench says whether the benches'
# state already holds the translations; thrashed+warm - thrashed what loading them ahead saves.
# Torch is the device's reference tool here, not a dependency of the library. Run on the GPU
# machine from the repository root:
#   NSAJIT_LIBRARY=build/libnsajit.so python3 scripts/warm_pages_probe.py
import statistics, sys, torch
sys.path.insert(0, "python")
import nsajit
torch.manual_seed(0)
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
kv = torch.randn(262144, 576, device=dev).to(torch.bfloat16)  # the benches' pool: 288 MiB, 144 pages
page_bytes = 2 << 20
def page_touch(t):
    """One element of each 2 MB page of t, the list repeated to ~256K entries: the gather that
    reads them spreads over every SM, each block over a run of consecutive pages."""
    offs = torch.arange(0, t.numel(), page_bytes // t.element_size(), device=dev)
    return t.view(-1), offs.repeat(max(1, (256 << 10) // offs.numel()))
pool_flat, pool_offs = page_touch(kv)
big = torch.empty(16 << 30, dtype=torch.uint8, device=dev)
big_flat, big_offs = page_touch(big)
def timed(fn, thrash, warm, iters=31):
    ts = []
    for i in range(iters + 2):
        flush.zero_()
        if thrash: big_flat[big_offs].sum()
        if warm: pool_flat[pool_offs].sum()
        torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU time without memory traffic: hides the Python call's host cost
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        if i >= 2: ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)
print(f"{torch.cuda.get_device_name()}; pool {kv.numel() * 2 / 1e6:.0f} MB; medians of 31, us", flush=True)
for h in (16, 64, 128):
    for rows in (1, 2, 64):
        q = torch.randn(rows, h, 576, device=dev).to(torch.bfloat16)
        idx = torch.randint(0, kv.shape[0], (rows, 2048), device=dev, dtype=torch.int32)
        call = lambda: nsajit.sparse_mla(q, kv, idx, 576 ** -0.5, num_splits=0)
        call()
        bench, thr, warm = timed(call, False, False), timed(call, True, False), timed(call, True, True)
        print(f"decode h{h} rows{rows} bf16: bench {bench:.2f}, thrashed {thr:.2f} ({thr - bench:+.2f}), "
              f"thrashed+warm {warm:.2f} ({warm - thr:+.2f} against thrashed)", flush=True)
