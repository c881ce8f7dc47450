# warm_pages_probe.py: is a page walk on the small decode calls' critical path? The split kernel's
# first KV tile lands 3.5-4.9 us after entry where the index and the row, two cold DRAM trips, take
# ~1.5 (docs/notes/sparse_mla.md, "Twenty-fifth session"); the row's address is known only once
# its index arrives, so a translation miss would add a third step to that chain. Same call, same
# data, two conditions, both after the benches' 256 MB L2 flush: "cold" as the benches time it,
# "warm" with one byte of every 2 MB page of the KV pool read between the flush and the start
# event (translations loaded, the rows' lines still cold). warm - cold bounds what a kernel that
# loads the pool's translations at entry (beside the index load) could save. Torch is the device's
# reference tool here, not a dependency of the library. Run on the GPU machine from the repository root:
#   NSAJIT_LIBRARY=build/libnsajit.so python3 scripts/warm_pages_probe.py
import statistics, sys, torch
sys.path.insert(0, "python")
import nsajit
torch.manual_seed(0)
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
kv = torch.randn(262144, 576, device=dev).to(torch.bfloat16)  # the benches' pool: 302 MB, 151 pages
page_bytes = 2 << 20
touch = kv.view(-1)[:: page_bytes // 2]  # one element of each page
def timed(fn, warm, iters=31):
    ts = []
    for i in range(iters + 2):
        flush.zero_()
        if warm: touch.sum()
        torch.cuda._sleep(200_000)  # ~100 us of GPU time without memory traffic: hides the Python call's host cost
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        if i >= 2: ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)
print(f"{torch.cuda.get_device_name()}; pool {kv.numel() * 2 / 1e6:.0f} MB, {touch.numel()} pages touched", flush=True)
for h in (16, 64, 128):
    for rows in (1, 2, 64):
        q = torch.randn(rows, h, 576, device=dev).to(torch.bfloat16)
        idx = torch.randint(0, kv.shape[0], (rows, 2048), device=dev, dtype=torch.int32)
        call = lambda: nsajit.sparse_mla(q, kv, idx, 576 ** -0.5, num_splits=0)
        call()
        cold, warm = timed(call, False), timed(call, True)
        print(f"decode h{h} rows{rows} bf16: cold {cold:.2f} us, pages warm {warm:.2f} ({warm - cold:+.2f} us)", flush=True)
