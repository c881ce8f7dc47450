# slot_order_probe.py: does gathering each row's KV in slot order (indices sorted per row) make
# prefill over a large pool faster through L2 reuse across a wave's CTAs? Same data, same kernel;
# only the order of each row's indices differs (docs/notes/sparse_mla.md, "Thirtieth session";
# docs/notes/sparse_mla_slot_order_model.py predicts it). Torch is the device's reference tool here,
# not a dependency of the library. Run on the GPU machine from the repository root:
#   NSAJIT_LIBRARY=build/libnsajit.so python3 scripts/slot_order_probe.py   (PROBE_MIN=1: h64 only)
# PROBE_SKVS=262144 limits the pools; a library built with docs/notes/unmerged/clock-order.patch
# starts each CTA's sweep at the slot range a global clock points at (the sorted rows' lever).
# PROBE_DECODE=1: decode rows instead (one wave: 64 / 128 / 256 rows, automatic split count, the
# bench's 262,144-slot pool), where the L2 model also expects sorted rows to cut DRAM rows by a quarter.
import os, sys, statistics, torch
sys.path.insert(0, "python")
import nsajit
torch.manual_seed(0)
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def timed(fn, iters=7):
    ts = []
    for i in range(iters + 2):
        flush.zero_()
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        if i >= 2: ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)
kv = torch.randn(262144, 576, device=dev).to(torch.bfloat16)
if os.environ.get("PROBE_DECODE"):
    for h, rows in ((64, 64), (64, 128), (64, 256), (128, 64), (128, 128)):
        q = torch.randn(rows, h, 576, device=dev).to(torch.bfloat16)
        idx = torch.randint(0, 262144, (rows, 2048), device=dev, dtype=torch.int32)
        srt = torch.sort(idx, dim=1).values.contiguous()
        res, outs = {}, {}
        for name, ind in (("random", idx), ("sorted", srt)):
            outs[name] = nsajit.sparse_mla(q, kv, ind, 576 ** -0.5, num_splits=0)[0].float()
            res[name] = timed(lambda: nsajit.sparse_mla(q, kv, ind, 576 ** -0.5, num_splits=0), iters=15)
        d1 = (outs["sorted"] - outs["random"]).abs().max().item()
        print(f"decode h{h} rows{rows} bf16: random {res['random']:.1f} us, sorted {res['sorted']:.1f} "
              f"({res['sorted']/res['random']-1:+.1%}); max |out sorted - random| {d1:.2e}", flush=True)
    sys.exit(0)
HS = (64,) if os.environ.get("PROBE_MIN") else (64, 128)
SKVS = (262144,) if os.environ.get("PROBE_MIN") else (262144, 8192, 32768)
if os.environ.get("PROBE_SKVS"): SKVS = tuple(int(x) for x in os.environ["PROBE_SKVS"].split(","))
for h in HS:
    q = torch.randn(4096, h, 576, device=dev).to(torch.bfloat16)
    for skv, sq in [(k, 4096) for k in SKVS] + [(262144, 264)]:  # 264 rows: two waves at h64 (four at h128), still aligned
        qq = q[:sq].contiguous()
        idx = torch.randint(0, skv, (sq, 2048), device=dev, dtype=torch.int32)
        srt = torch.sort(idx, dim=1).values.contiguous()
        coarse = (idx >> max(0, skv.bit_length() - 1 - 4))  # 16 slot ranges, random order inside each
        buck = torch.gather(idx, 1, torch.sort(coarse, dim=1, stable=True).indices).contiguous()
        res = {}
        outs = {}
        for name, ind in (("random", idx), ("sorted", srt), ("buckets16", buck)):
            o, l = nsajit.sparse_mla(qq, kv, ind, 576 ** -0.5, prefill=True)
            outs[name] = o.float()
            res[name] = timed(lambda: nsajit.sparse_mla(qq, kv, ind, 576 ** -0.5, prefill=True))
        d1 = (outs["sorted"] - outs["random"]).abs().max().item()
        print(f"prefill h{h} sq{sq} skv{skv} bf16: random {res['random']:.1f} us, sorted {res['sorted']:.1f} "
              f"({res['sorted']/res['random']-1:+.1%}), buckets16 {res['buckets16']:.1f} ({res['buckets16']/res['random']-1:+.1%}); "
              f"max |out sorted - random| {d1:.2e}", flush=True)
    del q
