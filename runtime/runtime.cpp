// runtime.cpp — spec -> cubin (once per process) -> function (once per context) -> launch.
#include "runtime/runtime.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "generator/family.hpp"
#include "generator/generator.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "runtime/once_map.hpp"

namespace nsajit {
namespace {

struct ContextSpec {
  unsigned long long context_id;  // cuCtxGetId: a context handle may be reused, its id is not
  KernelSpec spec;
  friend bool operator==(const ContextSpec&, const ContextSpec&) = default;
};
struct ContextSpecHash {
  std::size_t operator()(const ContextSpec& k) const noexcept {
    return KernelSpecHash{}(k.spec) ^ (std::hash<unsigned long long>{}(k.context_id) * 0x9e3779b97f4a7c15ull);
  }
};

using Cubin = std::shared_ptr<const std::vector<char>>;

struct State {
  CubinCache cache{default_cache_dir()};
  std::uint64_t max_cache_bytes = cache_max_bytes_from_env();  // 0: no bound
  detail::OnceMap<KernelSpec, Cubin, KernelSpecHash> cubins;
  detail::OnceMap<ContextSpec, std::shared_ptr<const LoadedKernel>, ContextSpecHash> kernels;
  std::mutex records_mutex;
  std::vector<KernelRecord> records;
};

thread_local CUstream t_launch_stream = nullptr;
thread_local bool t_launch_stream_active = false;

// Throws CaptureError when this thread's launch stream (LaunchStreamScope) is capturing a graph;
// `also` is appended to its message (what the call would have waited for instead of compiling).
void refuse_compile_while_capturing(const KernelSpec& spec, std::string_view also = "") {
  if (!t_launch_stream_active) return;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = driver::api().cuStreamIsCapturing(t_launch_stream, &status);
  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: the legacy stream while another stream captures globally.
  if (r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE) return;
  throw CaptureError(fmt::format(
      "nsajit: kernel {} is not compiled and its launch stream {} is capturing a CUDA graph (compiling "
      "inside a capture would stall it): call nsajit_precompile / nsajit::precompile (Python: "
      "nsajit.precompile) for spec \"{}\", or make the same call once before capturing{}",
      readable_name(spec), static_cast<const void*>(t_launch_stream), canonical_text(spec), also));
}

State& state() {
  static State s;
  return s;
}

// Why strict mode stopped, and the command that fills the cache with this kernel (or, for a
// directory the cache does not trust, why it was not read).
std::string not_precompiled_message(const std::string& name, const std::string& dir) {
  if (const std::string why = cache_dir_distrust_reason(dir); !why.empty())
    return fmt::format("kernel {} cannot be taken from the cache {}: nsajit does not use that path ({}), and strict "
                       "mode (NSAJIT_NO_JIT=1 or nsajit::set_strict_mode) forbids compiling it at run time; {}, or "
                       "point NSAJIT_CACHE_DIR at a directory of this user's and precompile there",
                       name, dir, why, cache_dir_remedy(why));
  return fmt::format("kernel {} is not in the cache {} and strict mode (NSAJIT_NO_JIT=1 or "
                     "nsajit::set_strict_mode) forbids compiling it at run time; produce it with "
                     "`NSAJIT_CACHE_DIR={} nsajit precompile --spec {}` (or precompile the whole fleet: "
                     "`nsajit precompile --model deepseek-v3.2 --tp <tp> --arch <arch>`)",
                     name, dir, dir, name);
}

// Generates, then takes the cubin from the disk cache or compiles it. Runs once per spec.
Cubin obtain_cubin(const KernelSpec& spec, CubinSource* source_out = nullptr) {
  State& s = state();
  CubinSource source = CubinSource::memory;
  const Cubin& cubin = s.cubins.get(spec, [&] {
    const auto start = std::chrono::steady_clock::now();
    const std::string name = readable_name(spec);
    const std::string text = render_source(spec);
    const std::vector<std::string> options = nvrtc_options(spec.arch);
    const CacheKey key = make_cache_key({.nsajit_version = version(),
                                         .nvrtc_version = nvrtc_version(),
                                         .arch = to_string(spec.arch),
                                         .options = options,
                                         .source = text});
    double compile_ms = 0;
    CacheLookup found;
    // A capturing caller must not wait on another process's entry lock either (held while it compiles).
    const std::function<void()> before_lock_wait = [&] {
      refuse_compile_while_capturing(spec, " (another process holds its cache entry's lock, compiling it)");
    };
    if (strict_mode()) {
      std::optional<std::vector<char>> cached = s.cache.load(name, key, before_lock_wait);
      if (!cached) throw KernelNotPrecompiled(not_precompiled_message(name, s.cache.dir()));
      found.cubin = std::move(*cached);
      found.hit = true;
      note_cache_entry_used(s.cache.entry_path(name, key));
    } else {
      found = s.cache.get_or_build(
          name, key,
          [&] {
            refuse_compile_while_capturing(spec);
            CompileResult r = compile_cubin(name, text, options);
            compile_ms = r.compile_ms;
            return std::move(r.cubin);
          },
          before_lock_wait);
      if (found.hit) note_cache_entry_used(s.cache.entry_path(name, key));
      if (found.stored && s.max_cache_bytes > 0)
        enforce_cache_size_bound(s.cache.dir(), s.max_cache_bytes, s.cache.entry_path(name, key));
    }
    source = found.hit ? CubinSource::disk_cache : CubinSource::compiled;
    const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard lock(s.records_mutex);
      s.records.push_back({name, source, compile_ms, total_ms - compile_ms, found.cubin.size(),
                           found.hit || found.stored, key.digest});
    }
    return std::make_shared<const std::vector<char>>(std::move(found.cubin));
  }, [&] { refuse_compile_while_capturing(spec); });  // another thread's build may be a compile
  if (source_out) *source_out = source;
  return cubin;
}

// -1: not decided yet (read NSAJIT_NO_JIT on first use), 0 off, 1 on.
std::atomic<int> g_strict{-1};

char arch_suffix_for(int sm) {
  // Arch-specific ("a") targets exist from Hopper on; they unlock wgmma/setmaxnreg on sm_90a.
  return sm >= 90 ? 'a' : 0;
}

}  // namespace

std::string version() { return NSAJIT_VERSION; }

void set_strict_mode(bool on) { g_strict.store(on ? 1 : 0); }

bool strict_mode() {
  int v = g_strict.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("NSAJIT_NO_JIT");
    const std::string_view text = env ? env : "";
    if (!text.empty() && text != "0" && text != "1")
      throw InvalidArgument(fmt::format("environment variable NSAJIT_NO_JIT = \"{}\": expected 1 (strict mode: "
                                        "never compile at run time), 0 or unset",
                                        text));
    int expected = -1;
    g_strict.compare_exchange_strong(expected, text == "1" ? 1 : 0);  // set_strict_mode may have won
    v = g_strict.load();
  }
  return v == 1;
}

LaunchStreamScope::LaunchStreamScope(CUstream stream)
    : previous_(t_launch_stream), previous_active_(t_launch_stream_active) {
  t_launch_stream = stream;
  t_launch_stream_active = true;
}

LaunchStreamScope::~LaunchStreamScope() {
  t_launch_stream = previous_;
  t_launch_stream_active = previous_active_;
}

std::string cache_dir() { return state().cache.dir(); }

Arch current_device_arch() {
  const driver::ContextInfo& device = driver::current_context_info();
  const int sm = device.major * 10 + device.minor;
  return Arch{sm, arch_suffix_for(sm)};
}

KernelSpec spec_for_current_device(KernelSpec spec) {
  spec.arch = current_device_arch();
  spec = with_default_tile(spec);
  validate(spec);
  return spec;
}

const LoadedKernel& kernel(const KernelSpec& spec) {
  const driver::ContextInfo& context = driver::current_context_info();
  return *state().kernels.get(ContextSpec{context.id, spec}, [&] {
    const Cubin cubin = obtain_cubin(spec);
    const FamilyTraits& t = traits(spec.family);
    // Loading a module is not a stream operation, but a global-mode capture on any stream forbids
    // it unless this thread relaxes its capture mode; a precompiled kernel may be loaded inside one.
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    NSAJIT_CU(cuThreadExchangeStreamCaptureMode, &mode);
    struct RestoreMode {
      CUstreamCaptureMode mode;
      ~RestoreMode() { driver::api().cuThreadExchangeStreamCaptureMode(&mode); }
    } restore{mode};
    CUmodule module = nullptr;
    NSAJIT_CU(cuModuleLoadData, &module, cubin->data());  // modules live as long as the context
    struct UnloadUnlessKept {  // a failed lookup is retried by the next call, which loads it again
      CUmodule module;
      ~UnloadUnlessKept() {
        if (module) driver::api().cuModuleUnload(module);
      }
    } unload{module};
    auto loaded = std::make_shared<LoadedKernel>();
    NSAJIT_CU(cuModuleGetFunction, &loaded->function, module, t.kernel_entry);
    if (const unsigned smem = t.max_dynamic_smem(spec); smem > 0)
      NSAJIT_CU(cuFuncSetAttribute, loaded->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem));
    unload.module = nullptr;
    return std::shared_ptr<const LoadedKernel>(std::move(loaded));
  }, [&] {
    if (!state().cubins.ready(spec)) refuse_compile_while_capturing(spec);  // a module load alone may be waited for
  });
}

namespace {
// The cuLaunchKernelEx configuration of `g`: clusters of g.cluster_x CTAs along x (when > 0) and
// programmatic stream serialization (when g.programmatic). `attributes` must outlive the returned
// value, which points to it.
CUlaunchConfig launch_config(const LaunchGeometry& g, CUstream stream, CUlaunchAttribute (&attributes)[2]) {
  unsigned count = 0;
  if (g.cluster_x > 0) {
    CUlaunchAttribute& a = attributes[count++];
    a = CUlaunchAttribute{};
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = g.cluster_x;
    a.value.clusterDim.y = 1;
    a.value.clusterDim.z = 1;
  }
  if (g.programmatic) {
    CUlaunchAttribute& a = attributes[count++];
    a = CUlaunchAttribute{};
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = g.grid_x;
  config.gridDimY = g.grid_y;
  config.gridDimZ = g.grid_z;
  config.blockDimX = g.block;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = g.dynamic_smem;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return config;
}
}  // namespace

void launch(const LoadedKernel& k, const LaunchGeometry& g, const void* params, CUstream stream) {
  if (g.grid_x == 0 || g.grid_y == 0 || g.grid_z == 0) return;
  void* args[] = {const_cast<void*>(params)};
  if (g.cluster_x > 0 || g.programmatic) {
    CUlaunchAttribute attributes[2];
    const CUlaunchConfig config = launch_config(g, stream, attributes);
    NSAJIT_CU(cuLaunchKernelEx, &config, k.function, args, nullptr);
    return;
  }
  NSAJIT_CU(cuLaunchKernel, k.function, g.grid_x, g.grid_y, g.grid_z, g.block, 1, 1, g.dynamic_smem, stream, args,
            nullptr);
}

int resident_ctas(const LoadedKernel& k, const LaunchGeometry& g) {
  // Keyed by the loaded kernel (one per context and spec, kept for the process), not by the
  // CUfunction handle, which a later context could reuse without the opt-in set below.
  struct Key {
    const LoadedKernel* kernel;
    unsigned block, smem, cluster;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& x) const noexcept {
      return std::hash<const void*>{}(x.kernel) ^ (std::size_t(x.block) << 1) ^ (std::size_t(x.smem) << 12) ^
             (std::size_t(x.cluster) << 40);
    }
  };
  static std::mutex mutex;
  static std::unordered_map<Key, int, KeyHash> resident;
  if (g.cluster_x <= 1) throw std::logic_error("nsajit::resident_ctas: a cluster launch (cluster_x > 1) only");
  const unsigned cluster = g.cluster_x;
  const Key key{&k, g.block, g.dynamic_smem, cluster};
  {
    std::lock_guard lock(mutex);
    if (auto it = resident.find(key); it != resident.end()) return it->second;
  }
  // The opt-in lives on the function: set once here, before the first query and launch.
  if (cluster > 8)
    NSAJIT_CU(cuFuncSetAttribute, k.function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  LaunchGeometry one = g;  // one cluster
  one.grid_x = cluster;
  one.grid_y = one.grid_z = 1;
  one.programmatic = false;
  CUlaunchAttribute attributes[2];
  const CUlaunchConfig config = launch_config(one, nullptr, attributes);
  int clusters = 0;
  NSAJIT_CU(cuOccupancyMaxActiveClusters, &clusters, k.function, &config);
  const int ctas = clusters * int(cluster);
  std::lock_guard lock(mutex);
  resident[key] = ctas;
  return ctas;
}

KernelRecord precompile(const KernelSpec& spec_in) {
  KernelSpec spec = with_default_tile(spec_in);
  validate(spec);
  CubinSource source = CubinSource::memory;
  const Cubin cubin = obtain_cubin(spec, &source);
  // A spec this process already had is reported as a memory hit.
  KernelRecord record{readable_name(spec), source, 0, 0, cubin->size(), true, ""};
  std::lock_guard lock(state().records_mutex);
  for (const auto& r : state().records) {
    if (r.name != record.name) continue;
    if (source == CubinSource::memory) record.key = r.key;
    else record = r;
  }
  return record;
}

std::vector<KernelRecord> jit_records() {
  std::lock_guard lock(state().records_mutex);
  return state().records;
}

}  // namespace nsajit
