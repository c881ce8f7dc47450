"""Drop-in replacements for the DSA entry points of SGLang and FlashMLA, with their signatures,
defaults, return values, dtypes and shapes:

- nsajit.compat.sgl_kernel: fast_topk_v2, fast_topk_transform_fused, fast_topk_transform_ragged_fused
- nsajit.compat.sglang_nsa: transform_index_page_table_decode / _prefill, quantize_k_cache,
  dequantize_k_cache_paged
- nsajit.compat.flash_mla: flash_mla_sparse_fwd, get_mla_metadata, flash_mla_with_kvcache (sparse)

Where the original has a restriction nsajit does not (topk == 2048, h_q in {64, 128}) the
restriction is lifted; an argument nsajit cannot honour raises NotImplementedError naming it.
"""
