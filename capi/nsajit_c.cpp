// nsajit_c.cpp — the C ABI (include/nsajit/nsajit.h) over the C++ API: struct versioning, enum
// checks, exceptions to status codes plus a thread-local message.
#include "nsajit/nsajit.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "nsajit/spec.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace {

thread_local std::string t_last_error;

// Sets the thread's message; one that cannot be allocated is left empty (never a throw).
nsajit_status fail(nsajit_status status, const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();
  }
  return status;
}

[[noreturn]] void bad(const char* function, const char* argument, long long value, const std::string& expected) {
  nsajit::detail::throw_bad_argument(function, argument, value, expected);
}

// Runs `body` with every exception turned into a status and the thread's message.
template <class Body>
nsajit_status guarded(Body&& body) noexcept {
  try {
    t_last_error.clear();
    body();
    return NSAJIT_OK;
  } catch (const nsajit::InvalidArgument& e) {
    return fail(NSAJIT_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const nsajit::CaptureError& e) {
    return fail(NSAJIT_ERROR_CAPTURE, e.what());
  } catch (const nsajit::KernelNotPrecompiled& e) {
    return fail(NSAJIT_ERROR_NOT_PRECOMPILED, e.what());
  } catch (const nsajit::CompileError& e) {
    return fail(NSAJIT_ERROR_COMPILE, e.what());
  } catch (const nsajit::CudaError& e) {
    return fail(NSAJIT_ERROR_CUDA, e.what());
  } catch (const std::bad_alloc&) {
    t_last_error.clear();  // no allocation for the message either
    return NSAJIT_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    return fail(NSAJIT_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(NSAJIT_ERROR_INTERNAL, "nsajit: unknown exception");
  }
}

// Copies the caller's struct. struct_size must be at least this ABI's sizeof (no struct has tail
// padding, so a field appended later starts at the old sizeof: that version then accepts the old
// sizeof and gives the missing fields their defaults); a newer caller's bytes past this version's
// fields must be zero, and at most kMaxNewerBytes of them are read. Messages are built only for an
// error (this runs on every launch).
constexpr std::size_t kMaxNewerBytes = 4096;
template <class T>
T read_struct(const T* in, const char* function, const char* argument) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (in == nullptr) nsajit::detail::throw_bad_argument(function, argument, "null", "a pointer to the struct");
  const std::size_t size = in->struct_size;
  auto refuse = [&](long long value, const std::string& expected) {
    bad(function, (std::string(argument) + "->struct_size").c_str(), value, expected);
  };
  const auto abi = [] { return "sizeof the struct in nsajit.h ABI " + std::to_string(NSAJIT_ABI_VERSION); };
  if (size < sizeof(T)) refuse(static_cast<long long>(size), ">= " + std::to_string(sizeof(T)) + " (" + abi() + ")");
  if (size > sizeof(T) + kMaxNewerBytes)
    refuse(static_cast<long long>(std::min<std::size_t>(size, LLONG_MAX)),
           "<= " + std::to_string(sizeof(T) + kMaxNewerBytes) + " (" + abi() + ", plus at most " +
               std::to_string(kMaxNewerBytes) + " bytes of a newer version)");
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (std::size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      refuse(static_cast<long long>(size), "fields past byte " + std::to_string(sizeof(T)) +
                                               " (unknown to this library, ABI " + std::to_string(NSAJIT_ABI_VERSION) +
                                               ") to be zero; byte " + std::to_string(i) + " is not");
  T out;
  std::memcpy(&out, in, sizeof(T));
  return out;
}

// ABI 2's rule for appending fields: no argument struct ends in padding.
#define NSAJIT_NO_TAIL_PADDING(T, last) \
  static_assert(sizeof(T) == offsetof(T, last) + sizeof(T::last), #T " must end with its last field")
NSAJIT_NO_TAIL_PADDING(nsajit_index_transform_args, offsets);
NSAJIT_NO_TAIL_PADDING(nsajit_topk_args, score_dtype);
NSAJIT_NO_TAIL_PADDING(nsajit_sparse_mla_args, attn_sink);
NSAJIT_NO_TAIL_PADDING(nsajit_fp8_kv_quantize_args, reserved);
NSAJIT_NO_TAIL_PADDING(nsajit_fp8_kv_gather_args, out_row_stride);
NSAJIT_NO_TAIL_PADDING(nsajit_kernel_spec, reserved);
#undef NSAJIT_NO_TAIL_PADDING

bool flag(const char* function, const char* name, std::int32_t v) {
  if (v != 0 && v != 1) bad(function, name, v, "0 or 1");
  return v == 1;
}

nsajit::IndexMode mode_of(const char* function, std::int32_t v) {
  if (v < NSAJIT_MODE_DECODE || v > NSAJIT_MODE_RAGGED)
    bad(function, "mode", v, "NSAJIT_MODE_DECODE (0), NSAJIT_MODE_PREFILL (1) or NSAJIT_MODE_RAGGED (2)");
  return static_cast<nsajit::IndexMode>(v);
}

nsajit::KvDtype kv_dtype_of(const char* function, std::int32_t v) {
  if (v != NSAJIT_KV_BF16 && v != NSAJIT_KV_FP8_E4M3)
    bad(function, "kv_dtype", v, "NSAJIT_KV_BF16 (0) or NSAJIT_KV_FP8_E4M3 (1)");
  return static_cast<nsajit::KvDtype>(v);
}

nsajit::ScoreDtype score_dtype_of(const char* function, const char* argument, std::int32_t v) {
  if (v != NSAJIT_SCORES_FP32 && v != NSAJIT_SCORES_BF16)
    bad(function, argument, v, "NSAJIT_SCORES_FP32 (0) or NSAJIT_SCORES_BF16 (1)");
  return static_cast<nsajit::ScoreDtype>(v);
}

CUstream stream_of(void* stream) { return static_cast<CUstream>(stream); }

static_assert(NSAJIT_TOPK_ALGORITHM_EXACT_SWEEPS == int(nsajit::TopkAlgorithm::exact_sweeps) &&
                  NSAJIT_TOPK_ALGORITHM_CLUSTER_SWEEPS == int(nsajit::TopkAlgorithm::cluster_sweeps) &&
                  NSAJIT_TOPK_ALGORITHM_SPECULATIVE_SWEEP == int(nsajit::TopkAlgorithm::speculative_sweep) &&
                  NSAJIT_TOPK_ALGORITHM_DENSE_REGISTERS == int(nsajit::TopkAlgorithm::dense_registers) &&
                  NSAJIT_TOPK_ALGORITHM_CLUSTER_LISTS == int(nsajit::TopkAlgorithm::cluster_lists),
              "nsajit.h's top-k algorithm numbers follow nsajit::TopkAlgorithm");

nsajit::KernelSpec spec_of(const nsajit_kernel_spec* in, const char* function) {
  const nsajit_kernel_spec s = read_struct(in, function, "spec");
  if (s.reserved != 0) bad(function, "spec->reserved", s.reserved, "0");
  if (s.family < NSAJIT_FAMILY_INDEX_TRANSFORM || s.family > NSAJIT_FAMILY_FP8_KV_GATHER)
    bad(function, "spec->family", s.family, "an NSAJIT_FAMILY_* value (0..5)");
  nsajit::KernelSpec spec;
  spec.family = static_cast<nsajit::Family>(s.family);
  spec.h_q = s.h_q;
  spec.topk = s.topk;
  spec.page_size = s.page_size;
  spec.mode = mode_of(function, s.mode);
  spec.kv_dtype = kv_dtype_of(function, s.kv_dtype);
  spec.next_n = s.next_n;
  spec.fused_transform = flag(function, "spec->fused_transform", s.fused_transform);
  spec.sorted = flag(function, "spec->sorted", s.sorted);
  spec.precise = flag(function, "spec->precise", s.precise);
  spec.score_dtype = score_dtype_of(function, "spec->score_dtype", s.score_dtype);
  if (s.topk_algorithm < NSAJIT_TOPK_ALGORITHM_EXACT_SWEEPS || s.topk_algorithm > NSAJIT_TOPK_ALGORITHM_CLUSTER_LISTS)
    bad(function, "spec->topk_algorithm", s.topk_algorithm, "an NSAJIT_TOPK_ALGORITHM_* value (0..4)");
  spec.tile.algorithm = static_cast<nsajit::TopkAlgorithm>(s.topk_algorithm);
  spec.tile.threads = s.threads;
  spec.tile.block_tokens = s.block_tokens;
  spec.tile.heads_per_cta = s.heads_per_cta;
  if (s.arch_sm == 0) {
    spec = nsajit::spec_for_current_device(spec);  // fills arch + default tile, validates
  } else {
    if (s.arch_sm < 0 || s.arch_sm > 1000) bad(function, "spec->arch_sm", s.arch_sm, "0 (current device) or e.g. 90");
    if (s.arch_suffix != 0 && (s.arch_suffix < 'a' || s.arch_suffix > 'z'))
      bad(function, "spec->arch_suffix", s.arch_suffix, "0 or a lowercase letter such as 'a'");
    spec.arch = nsajit::Arch{s.arch_sm, static_cast<char>(s.arch_suffix)};
    spec = nsajit::with_default_tile(spec);
    nsajit::validate(spec);
  }
  return spec;
}

void copy_text(const std::string& text, char* buffer, std::size_t capacity, std::size_t* needed_out,
               const char* function) {
  const std::size_t needed = text.size() + 1;
  if (needed_out != nullptr) *needed_out = needed;
  if (buffer == nullptr && capacity != 0)
    nsajit::detail::throw_bad_argument(function, "buffer", "null", "a buffer when capacity > 0");
  if (capacity < needed) {
    if (buffer != nullptr && capacity > 0) buffer[0] = '\0';
    throw std::length_error(std::string(function) + ": argument capacity = " + std::to_string(capacity) +
                            ": expected >= " + std::to_string(needed) + " bytes (the text and its NUL)");
  }
  std::memcpy(buffer, text.c_str(), needed);
}

// copy_text's length_error becomes NSAJIT_ERROR_BUFFER_TOO_SMALL.
template <class Body>
nsajit_status guarded_text(Body&& body) noexcept {
  std::string message;
  const nsajit_status s = guarded([&] {
    try {
      body();
    } catch (const std::length_error& e) {
      message = e.what();
    }
  });
  if (s == NSAJIT_OK && !message.empty()) return fail(NSAJIT_ERROR_BUFFER_TOO_SMALL, message.c_str());
  return s;
}

// A sparse MLA sizing query: the sizes checked as a launch checks them, then *out = query(...).
template <class Out, class Result>
nsajit_status mla_sizing(const char* function, std::int32_t rows, std::int32_t h_q, std::int32_t topk,
                         std::int32_t num_splits, const char* out_name, Out* out, Result (*query)(int, int, int, int)) {
  return guarded([&] {
    if (out == nullptr) nsajit::detail::throw_bad_argument(function, out_name, "null", "a pointer");
    *out = static_cast<Out>(query(rows, h_q, topk, num_splits));  // the query checks the sizes
  });
}

void fill_record(const nsajit::KernelRecord& r, nsajit_kernel_record* out, const char* function) {
  if (out == nullptr) nsajit::detail::throw_bad_argument(function, "record_out", "null", "a record to fill");
  if (out->struct_size < sizeof(nsajit_kernel_record))
    bad(function, "record_out->struct_size", static_cast<long long>(out->struct_size),
        ">= " + std::to_string(sizeof(nsajit_kernel_record)));
  std::memset(out->name, 0, sizeof out->name);
  std::strncpy(out->name, r.name.c_str(), sizeof out->name - 1);
  out->source = static_cast<std::int32_t>(r.source);
  out->compile_ms = r.compile_ms;
  out->load_ms = r.load_ms;
  out->cubin_bytes = r.cubin_bytes;
  out->on_disk = r.on_disk ? 1 : 0;
}

// NSAJIT_COPY_FIELDS(c, a, x, y, ...): c.x = a.x; c.y = a.y; ... for the fields a C struct and
// its C++ args name alike (fields that need a check or a conversion are set one by one).
#define NSAJIT_EXPAND(...) NSAJIT_EXPAND3(NSAJIT_EXPAND3(NSAJIT_EXPAND3(NSAJIT_EXPAND3(__VA_ARGS__))))
#define NSAJIT_EXPAND3(...) NSAJIT_EXPAND2(NSAJIT_EXPAND2(NSAJIT_EXPAND2(NSAJIT_EXPAND2(__VA_ARGS__))))
#define NSAJIT_EXPAND2(...) NSAJIT_EXPAND1(NSAJIT_EXPAND1(NSAJIT_EXPAND1(NSAJIT_EXPAND1(__VA_ARGS__))))
#define NSAJIT_EXPAND1(...) __VA_ARGS__
#define NSAJIT_COPY_FIELDS(to, from, ...) __VA_OPT__(NSAJIT_EXPAND(NSAJIT_COPY_NEXT(to, from, __VA_ARGS__)))
#define NSAJIT_COPY_NEXT(to, from, field, ...) \
  to.field = from.field;                        \
  __VA_OPT__(NSAJIT_COPY_AGAIN NSAJIT_PARENS(to, from, __VA_ARGS__))
#define NSAJIT_PARENS ()
#define NSAJIT_COPY_AGAIN() NSAJIT_COPY_NEXT

// The page-table fields (§1) the transform and the fused top-k share, C struct to C++ args.
template <class CArgs, class CppArgs>
void copy_transform_fields(const CArgs& a, CppArgs& c) {
  NSAJIT_COPY_FIELDS(c, a, page_table, page_table_width, page_table_row_stride, page_size, cu_seqlens_q,
                     num_requests, offsets);
}

// A C struct with its struct_size, zero but for what `set` sets (the documented defaults).
template <class T, class Set>
T defaults(Set set) {
  T a{};
  a.struct_size = sizeof a;
  set(a);
  return a;
}

// The C++ arguments of each C struct (enum and flag fields checked; `fn` names the C function).
nsajit::IndexTransformArgs to_cpp(const nsajit_index_transform_args& a, const char* fn) {
  nsajit::IndexTransformArgs c;
  c.mode = mode_of(fn, a.mode);
  NSAJIT_COPY_FIELDS(c, a, topk_indices, out, rows, topk);
  copy_transform_fields(a, c);
  return c;
}

nsajit::TopkArgs to_cpp(const nsajit_topk_args& a, const char* fn) {
  nsajit::TopkArgs c;
  NSAJIT_COPY_FIELDS(c, a, scores, score_row_stride, lengths, row_starts, out, rows, width, topk, next_n);
  c.score_dtype = score_dtype_of(fn, "score_dtype", a.score_dtype);
  c.sorted = flag(fn, "sorted", a.sorted);
  c.fused_transform = flag(fn, "fused_transform", a.fused_transform);
  c.mode = c.fused_transform ? mode_of(fn, a.mode) : nsajit::IndexMode::decode;
  copy_transform_fields(a, c);
  return c;
}

nsajit::SparseMlaDecodeArgs to_cpp(const nsajit_sparse_mla_args& a, const char* fn) {
  nsajit::SparseMlaDecodeArgs c;
  c.kv_dtype = kv_dtype_of(fn, a.kv_dtype);
  NSAJIT_COPY_FIELDS(c, a, q, kv, num_slots, kv_row_stride, page_size, kv_page_stride, indices, topk_length, out,
                     lse, max_logits, rows, next_n, h_q, topk, sm_scale, workspace, workspace_bytes, num_splits,
                     attn_sink);
  c.precise = flag(fn, "precise", a.precise);
  if (c.workspace == nullptr && c.workspace_bytes != 0)
    bad(fn, "workspace_bytes", static_cast<long long>(c.workspace_bytes), "0 when workspace is null");
  return c;
}

nsajit::Fp8KvQuantizeArgs to_cpp(const nsajit_fp8_kv_quantize_args& a, const char* fn) {
  if (a.reserved != 0) bad(fn, "reserved", a.reserved, "0");
  if (a.scale_fmt != NSAJIT_SCALE_FP32 && a.scale_fmt != NSAJIT_SCALE_UE8M0)
    bad(fn, "scale_fmt", a.scale_fmt, "NSAJIT_SCALE_FP32 (0) or NSAJIT_SCALE_UE8M0 (1)");
  nsajit::Fp8KvQuantizeArgs c;
  NSAJIT_COPY_FIELDS(c, a, kv, kv_row_stride, slots, n, cache, num_pages, page_size, page_stride_bytes);
  c.scale_fmt = static_cast<nsajit::Fp8ScaleFormat>(a.scale_fmt);
  return c;
}

nsajit::Fp8KvGatherArgs to_cpp(const nsajit_fp8_kv_gather_args& a, const char*) {
  nsajit::Fp8KvGatherArgs c;
  NSAJIT_COPY_FIELDS(c, a, cache, num_pages, page_size, page_stride_bytes, slots, n, out, out_row_stride);
  return c;
}

// A launch through the C ABI: the caller's struct read and converted, then `run` on the stream
// (a compile while that stream captures a graph is an error, not a stall).
template <class CArgs, class CppArgs>
nsajit_status launch_with(const CArgs* args, void* stream, const char* fn, void (*run)(const CppArgs&, CUstream)) {
  return guarded([&] {
    const CppArgs c = to_cpp(read_struct(args, fn, "args"), fn);
    const nsajit::LaunchStreamScope scope(stream_of(stream));
    run(c, stream_of(stream));
  });
}

}  // namespace

extern "C" {

int nsajit_abi_version(void) { return NSAJIT_ABI_VERSION; }

const char* nsajit_version(void) { return NSAJIT_VERSION; }

const char* nsajit_last_error(void) { return t_last_error.c_str(); }

const char* nsajit_status_name(nsajit_status status) {
  switch (status) {
    case NSAJIT_OK: return "NSAJIT_OK";
    case NSAJIT_ERROR_INVALID_ARGUMENT: return "NSAJIT_ERROR_INVALID_ARGUMENT";
    case NSAJIT_ERROR_CUDA: return "NSAJIT_ERROR_CUDA";
    case NSAJIT_ERROR_COMPILE: return "NSAJIT_ERROR_COMPILE";
    case NSAJIT_ERROR_CAPTURE: return "NSAJIT_ERROR_CAPTURE";
    case NSAJIT_ERROR_BUFFER_TOO_SMALL: return "NSAJIT_ERROR_BUFFER_TOO_SMALL";
    case NSAJIT_ERROR_OUT_OF_MEMORY: return "NSAJIT_ERROR_OUT_OF_MEMORY";
    case NSAJIT_ERROR_INTERNAL: return "NSAJIT_ERROR_INTERNAL";
    case NSAJIT_ERROR_NOT_PRECOMPILED: return "NSAJIT_ERROR_NOT_PRECOMPILED";
  }
  return "NSAJIT_UNKNOWN_STATUS";
}

nsajit_index_transform_args nsajit_index_transform_defaults(void) {
  return defaults<nsajit_index_transform_args>(
      [](auto& a) { a.mode = NSAJIT_MODE_DECODE; a.topk = 2048; a.page_size = 1; });
}

nsajit_status nsajit_index_transform(const nsajit_index_transform_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_index_transform", &nsajit::index_transform);
}

nsajit_topk_args nsajit_topk_defaults(void) {
  return defaults<nsajit_topk_args>(
      [](auto& a) { a.topk = 2048; a.mode = NSAJIT_MODE_DECODE; a.page_size = 1; a.next_n = 1; });
}

nsajit_status nsajit_topk(const nsajit_topk_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_topk", &nsajit::topk);
}

nsajit_sparse_mla_args nsajit_sparse_mla_defaults(void) {
  return defaults<nsajit_sparse_mla_args>([](auto& a) {
    a.kv_row_stride = kMlaDimQK; a.kv_dtype = NSAJIT_KV_BF16; a.page_size = 1; a.next_n = 1; a.h_q = 16; a.topk = 2048;
  });
}

nsajit_status nsajit_sparse_mla_decode(const nsajit_sparse_mla_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_sparse_mla_decode", &nsajit::sparse_mla_decode);
}

nsajit_status nsajit_sparse_mla_prefill(const nsajit_sparse_mla_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_sparse_mla_prefill",
                     +[](const nsajit::SparseMlaDecodeArgs& c, CUstream s) { nsajit::sparse_mla_prefill(c, s); });
}

nsajit_status nsajit_sparse_mla_num_splits(int32_t rows, int32_t h_q, int32_t topk, int32_t num_splits,
                                           int32_t* splits_out) {
  return mla_sizing("nsajit_sparse_mla_num_splits", rows, h_q, topk, num_splits, "splits_out", splits_out,
                    &nsajit::sparse_mla_num_splits);
}

nsajit_status nsajit_sparse_mla_workspace_bytes(int32_t rows, int32_t h_q, int32_t topk, int32_t num_splits,
                                                size_t* bytes_out) {
  return mla_sizing("nsajit_sparse_mla_workspace_bytes", rows, h_q, topk, num_splits, "bytes_out", bytes_out,
                    &nsajit::sparse_mla_workspace_bytes);
}

nsajit_fp8_kv_quantize_args nsajit_fp8_kv_quantize_defaults(void) {
  return defaults<nsajit_fp8_kv_quantize_args>(
      [](auto& a) { a.kv_row_stride = kMlaDimQK; a.page_size = 64; a.scale_fmt = NSAJIT_SCALE_FP32; });
}

nsajit_status nsajit_fp8_kv_quantize(const nsajit_fp8_kv_quantize_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_fp8_kv_quantize", &nsajit::fp8_kv_quantize);
}

nsajit_fp8_kv_gather_args nsajit_fp8_kv_gather_defaults(void) {
  return defaults<nsajit_fp8_kv_gather_args>([](auto& a) { a.page_size = 64; a.out_row_stride = kMlaDimQK; });
}

nsajit_status nsajit_fp8_kv_gather(const nsajit_fp8_kv_gather_args* args, void* stream) {
  return launch_with(args, stream, "nsajit_fp8_kv_gather", &nsajit::fp8_kv_gather);
}

nsajit_kernel_spec nsajit_kernel_spec_defaults(void) {
  return defaults<nsajit_kernel_spec>([](auto& s) {
    s.family = NSAJIT_FAMILY_TOPK; s.topk = 2048; s.page_size = 1; s.mode = NSAJIT_MODE_DECODE;
    s.kv_dtype = NSAJIT_KV_BF16; s.next_n = 1;
  });
}

void check_record_out(const nsajit_kernel_record* record_out, const char* fn) {
  if (record_out != nullptr && record_out->struct_size < sizeof(nsajit_kernel_record))
    bad(fn, "record_out->struct_size", static_cast<long long>(record_out->struct_size),
        ">= " + std::to_string(sizeof(nsajit_kernel_record)));
}

nsajit_status nsajit_precompile(const nsajit_kernel_spec* spec, nsajit_kernel_record* record_out) {
  return guarded([&] {
    constexpr const char* fn = "nsajit_precompile";
    check_record_out(record_out, fn);
    const nsajit::KernelRecord r = nsajit::precompile(spec_of(spec, fn));
    if (record_out != nullptr) fill_record(r, record_out, fn);
  });
}

nsajit_status nsajit_precompile_text(const char* spec_text, nsajit_kernel_record* record_out) {
  return guarded([&] {
    constexpr const char* fn = "nsajit_precompile_text";
    constexpr std::size_t kMaxText = 4096;
    if (spec_text == nullptr) nsajit::detail::throw_bad_argument(fn, "spec_text", "null", "a NUL-terminated spec text");
    const std::size_t length = strnlen(spec_text, kMaxText);
    if (length == kMaxText)
      nsajit::detail::throw_bad_argument(fn, "spec_text", "a text of 4096 bytes or more", "fewer than 4096 bytes");
    check_record_out(record_out, fn);
    const std::string text(spec_text, length);
    // Canonical text without arch= targets this device (asked only then: a bad field is named first).
    const nsajit::KernelSpec spec = nsajit::parse_spec_text(text, [] { return nsajit::current_device_arch(); });
    const nsajit::KernelRecord r = nsajit::precompile(spec);
    if (record_out != nullptr) fill_record(r, record_out, fn);
  });
}

nsajit_status nsajit_cache_dir(char* buffer, size_t capacity, size_t* needed_out) {
  return guarded_text([&] { copy_text(nsajit::cache_dir(), buffer, capacity, needed_out, "nsajit_cache_dir"); });
}

nsajit_status nsajit_nvrtc_version(char* buffer, size_t capacity, size_t* needed_out) {
  return guarded_text(
      [&] { copy_text(nsajit::nvrtc_version(), buffer, capacity, needed_out, "nsajit_nvrtc_version"); });
}

nsajit_status nsajit_generate_source(const nsajit_kernel_spec* spec, char* buffer, size_t capacity,
                                     size_t* needed_out) {
  return guarded_text([&] {
    constexpr const char* fn = "nsajit_generate_source";
    copy_text(nsajit::generate_source(spec_of(spec, fn)), buffer, capacity, needed_out, fn);
  });
}

nsajit_status nsajit_kernel_name(const nsajit_kernel_spec* spec, char* buffer, size_t capacity,
                                 size_t* needed_out) {
  return guarded_text([&] {
    constexpr const char* fn = "nsajit_kernel_name";
    copy_text(nsajit::readable_name(spec_of(spec, fn)), buffer, capacity, needed_out, fn);
  });
}

nsajit_status nsajit_jit_record_count(size_t* count_out) {
  return guarded([&] {
    if (count_out == nullptr)
      nsajit::detail::throw_bad_argument("nsajit_jit_record_count", "count_out", "null", "a pointer");
    *count_out = nsajit::jit_records().size();
  });
}

nsajit_status nsajit_jit_record(size_t index, nsajit_kernel_record* record_out) {
  return guarded([&] {
    constexpr const char* fn = "nsajit_jit_record";
    const std::vector<nsajit::KernelRecord> records = nsajit::jit_records();
    if (index >= records.size())
      bad(fn, "index", static_cast<long long>(index), "< the record count " + std::to_string(records.size()));
    fill_record(records[index], record_out, fn);
  });
}

}  // extern "C"
