"""The C++ library of the cpp_extension demo, as one source that builds two ways: with g++ as plain
C++ (host memory, loops) and with nvcc as CUDA (device memory, a shared-memory kernel). It has the
three things a GPU library's C++ is asked about: an RAII buffer type, a kernel templated on dtype
and tile size, and a thread-safe launcher behind a C API (so ctypes can call it). Builds are cached
under .cache/, keyed by a hash of source, flags and compiler version."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from pathlib import Path

from records.atomic import write_text
from records.paths import CACHE_DIR

BUILD_CACHE = CACHE_DIR / "t11_gpu" / "cpp"

LIBRARY = r"""
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

// Each build gets its own inline namespace, so the two builds' symbols have different names. Without it,
// g++ marks the launcher (a static local of an inline function) as a GNU unique symbol, which the dynamic
// loader shares across every library of the process, RTLD_LOCAL or not: the CUDA build loaded after the
// C++ one would run the C++ build's launcher and its host-code plans on device pointers.
#ifdef __CUDACC__
#define T11_BUILD cuda_build
#else
#define T11_BUILD host_build
#endif

namespace t11 {
inline namespace T11_BUILD {

std::atomic<long> g_live_buffers{0};  // buffers alive right now (a leak shows up here)

// RAII: the buffer owns its memory from construction to destruction, on every path out of a scope
// (return, exception). Move-only: a copy would free the same pointer twice.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
#ifdef __CUDACC__
    if (cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
#else
    ptr_ = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
#endif
    g_live_buffers.fetch_add(1);
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), n_(std::exchange(other.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      n_ = std::exchange(other.n_, 0);
    }
    return *this;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return n_; }

 private:
  void release() noexcept {
    if (ptr_ == nullptr) return;
#ifdef __CUDACC__
    cudaFree(ptr_);
#else
    ::operator delete(ptr_, std::align_val_t(64));
#endif
    ptr_ = nullptr;
    g_live_buffers.fetch_sub(1);
  }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// out = alpha * in^T for a rows x cols matrix, templated on the element type and the tile side.
// OOB = true plants a bug: the last element is also written one past the end of `out`.
#ifdef __CUDACC__
template <typename T, int TILE, bool OOB>
__global__ void scale_transpose_kernel(const T* in, T* out, int rows, int cols, T alpha) {
  __shared__ T tile[TILE][TILE + 1];  // +1: no bank conflicts on the column read
  int c = blockIdx.x * TILE + threadIdx.x, r = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += blockDim.y)
    if (c < cols && r + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(std::size_t)(r + j) * cols + c];
  __syncthreads();
  c = blockIdx.y * TILE + threadIdx.x;
  r = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += blockDim.y)
    if (c < rows && r + j < cols) {
      std::size_t k = (std::size_t)(r + j) * rows + c;
      out[k] = alpha * tile[threadIdx.x][threadIdx.y + j];
      if (OOB && k + 1 == (std::size_t)rows * cols) out[k + 1] = out[k];
    }
}
template <typename T, int TILE, bool OOB>
void scale_transpose(const T* in, T* out, int rows, int cols, T alpha) {
  dim3 block(TILE, 8), grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
  scale_transpose_kernel<T, TILE, OOB><<<grid, block, 0, cudaStreamPerThread>>>(in, out, rows, cols, alpha);
  cudaStreamSynchronize(cudaStreamPerThread);  // each host thread has its own stream
}
#else
template <typename T, int TILE, bool OOB>
void scale_transpose(const T* in, T* out, int rows, int cols, T alpha) {
  for (int r0 = 0; r0 < rows; r0 += TILE)
    for (int c0 = 0; c0 < cols; c0 += TILE)
      for (int r = r0; r < r0 + TILE && r < rows; ++r)
        for (int c = c0; c < c0 + TILE && c < cols; ++c) out[(std::size_t)c * rows + r] = alpha * in[(std::size_t)r * cols + c];
  if (OOB) out[(std::size_t)rows * cols] = out[(std::size_t)rows * cols - 1];
}
#endif

// The launcher: one process-wide object (a function-local static: initialised once, thread-safely,
// since C++11). A plan per (dtype, tile) is built on first use under a mutex, and never twice; the
// call itself runs outside the lock, so threads launch concurrently.
class Launcher {
 public:
  using Fn = void (*)(const void*, void*, int, int, double);
  static Launcher& instance() {
    static Launcher launcher;
    return launcher;
  }
  int run(int dtype, int tile, bool oob, const void* in, void* out, int rows, int cols, double alpha) {
    Fn fn = plan(dtype, tile, oob);
    if (fn == nullptr) return -1;
    calls_.fetch_add(1, std::memory_order_relaxed);
    fn(in, out, rows, cols, alpha);
    return 0;
  }
  long plans_built() const { return plans_built_.load(); }
  long calls() const { return calls_.load(); }

 private:
  template <typename T, int TILE, bool OOB>
  static void call(const void* in, void* out, int rows, int cols, double alpha) {
    scale_transpose<T, TILE, OOB>(static_cast<const T*>(in), static_cast<T*>(out), rows, cols, static_cast<T>(alpha));
  }
  template <typename T>
  static Fn pick(int tile, bool oob) {
    if (oob) return tile == 32 ? &call<T, 32, true> : nullptr;
    switch (tile) {
      case 8: return &call<T, 8, false>;
      case 16: return &call<T, 16, false>;
      case 32: return &call<T, 32, false>;
      default: return nullptr;
    }
  }
  Fn plan(int dtype, int tile, bool oob) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto key = std::make_tuple(dtype, tile, oob);
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    // Building a plan is the slow, once-only part (a real library would query the device, pick a
    // kernel, allocate a workspace); the sleep widens the window in which an unlocked cache would race.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Fn fn = dtype == 0 ? pick<float>(tile, oob) : dtype == 1 ? pick<double>(tile, oob) : nullptr;
    if (fn != nullptr) plans_built_.fetch_add(1);
    plans_.emplace(key, fn);
    return fn;
  }
  std::mutex mutex_;
  std::map<std::tuple<int, int, bool>, Fn> plans_;
  std::atomic<long> plans_built_{0}, calls_{0};
};

}  // inline namespace T11_BUILD
}  // namespace t11

extern "C" {
// dtype: 0 float32, 1 float64. Pointers are device pointers in the CUDA build, host ones otherwise.
int t11_scale_transpose(int dtype, int tile, const void* in, void* out, int rows, int cols, double alpha) {
  return t11::Launcher::instance().run(dtype, tile, false, in, out, rows, cols, alpha);
}
int t11_scale_transpose_oob(const void* in, void* out, int rows, int cols) {
  return t11::Launcher::instance().run(0, 32, true, in, out, rows, cols, 1.0);
}
long t11_plans_built() { return t11::Launcher::instance().plans_built(); }
long t11_calls() { return t11::Launcher::instance().calls(); }
long t11_live_buffers() { return t11::g_live_buffers.load(); }

// RAII under an exception: buffers made inside the scope are freed when it throws.
int t11_raii_scope(int throw_inside) {
  try {
    t11::DeviceBuffer<float> a(1024), b(2048);
    t11::DeviceBuffer<float> c(std::move(a));  // moved-from a owns nothing now
    if (throw_inside) throw std::runtime_error("failure inside the scope");
  } catch (const std::runtime_error&) {
    return 1;
  }
  return 0;
}

// The planted bug, end to end: copy in, run the out-of-bounds kernel into a buffer of exactly
// rows * cols elements, copy out. A memory checker must flag the write past the end.
int t11_oob_demo(int rows, int cols) {
  std::size_t n = (std::size_t)rows * cols;
  t11::DeviceBuffer<float> in(n), out(n);
#ifdef __CUDACC__
  cudaMemset(in.data(), 0, n * sizeof(float));
#else
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = 0.f;
#endif
  return t11_scale_transpose_oob(in.data(), out.data(), rows, cols);
}
}
"""

MAIN = r"""
#include <cstdio>
extern "C" int t11_oob_demo(int rows, int cols);
int main() { std::printf("ran: %d\n", t11_oob_demo(64, 48)); return 0; }
"""


def _cached(kind: str, source: str, cmd_of, suffix: str) -> Path:
    version = subprocess.run([cmd_of(Path("x"), Path("y"))[0], "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    key = hashlib.sha256("\0".join([kind, source, *cmd_of(Path("IN"), Path("OUT")), version]).encode()).hexdigest()[:20]
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    out = BUILD_CACHE / f"{kind}-{key}{suffix}"
    if not out.exists():
        src = BUILD_CACHE / f"{kind}-{key}.{'cu' if 'nvcc' in kind else 'cpp'}"
        write_text(src, source)
        tmp = out.with_name(out.name + ".tmp")
        proc = subprocess.run(cmd_of(src, tmp), capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{kind} build failed: {proc.stderr.strip()[:800]}")
        tmp.replace(out)
    return out


def build_cpu_library() -> Path:
    """g++: the C++ build, a shared library for ctypes."""
    return _cached("gxx-lib", LIBRARY, lambda s, o: ["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-pthread",
                                                     "-x", "c++", str(s), "-o", str(o)], ".so")


def build_asan_program() -> Path:
    """g++ with AddressSanitizer: the planted out-of-bounds write as a program."""
    return _cached("gxx-asan", LIBRARY + MAIN, lambda s, o: ["g++", "-std=c++17", "-O1", "-g", "-fsanitize=address",
                                                             "-fno-omit-frame-pointer", "-pthread", "-x", "c++", str(s),
                                                             "-o", str(o)], "")


def build_cuda_object() -> Path:
    """nvcc: the CUDA build of the same source, compiled for sm_90 (needs nvcc, not a GPU)."""
    return _cached("nvcc-obj", LIBRARY, lambda s, o: ["nvcc", "-std=c++17", "-arch=sm_90", "-Xcompiler", "-fPIC", "-c",
                                                      "-x", "cu", str(s), "-o", str(o)], ".o")


def build_cuda_library() -> Path:
    return _cached("nvcc-lib", LIBRARY, lambda s, o: ["nvcc", "-std=c++17", "-arch=sm_90", "-Xcompiler", "-fPIC",
                                                      "-shared", "-x", "cu", str(s), "-o", str(o)], ".so")


def build_cuda_program() -> Path:
    return _cached("nvcc-prog", LIBRARY + MAIN, lambda s, o: ["nvcc", "-std=c++17", "-arch=sm_90", "-lineinfo", "-x",
                                                              "cu", str(s), "-o", str(o)], "")


def load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.t11_scale_transpose.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_double]
    lib.t11_scale_transpose.restype = ctypes.c_int
    for name in ("t11_plans_built", "t11_calls", "t11_live_buffers"):
        getattr(lib, name).restype = ctypes.c_long
    lib.t11_raii_scope.argtypes = [ctypes.c_int]
    return lib


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
