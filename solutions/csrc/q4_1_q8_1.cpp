// Q4_1 weights times Q8_1 activations: the product llama.cpp's CPU backend uses for a Q4_1 model.
//
// A Q4_1 block is 32 weights w = d * q + m, stored as the GGUF does: d and m in fp16, then 16 bytes
// of codes q in 0..15 (byte j holds weight j in its low nibble and weight j + 16 in its high one).
// Each 32-block of an activation row is quantized to int8 (Q8_1): da = max|x| / 127, qa = round(x / da),
// sa = da * sum(qa). A block's dot product is then
//     sum_j (d q_j + m)(da qa_j) = d da * sum_j q_j qa_j + m sa,
// one integer dot product of unsigned codes with signed bytes (x86's `vpdpbusd`, 4 products a lane)
// and two scalar terms. Optionally a second int8 pass quantizes what the first left, x - da qa, in
// steps of da / 254 (lo): the block's integer sum is then 254 sum(q qa) + sum(q lo), exact in int32,
// and activations carry ~15 bits instead of 8, at one more `vpdpbusd` a block. solutions/q8_1.py is
// the same arithmetic written plainly; this file is its fast form for 1-8 activation rows, split over
// output rows across torch's intra-op threads.
//
// Instruction sets are chosen at run time: "avx512vnni" (vpdpbusd on 256-bit registers, EVEX form),
// "avxvnni" (the same instruction in its VEX form, on CPUs with AVX-VNNI but no AVX-512), and "avx2"
// (the floor: vpmaddubsw then vpmaddwd, two instructions where VNNI has one). Each kernel is compiled
// for its own target with a function attribute, so one build runs on any x86-64 CPU and `isas()` says
// which kernels this CPU can run.
// Left out: AMX tiles (batch 1-8 gives too few rows to fill a tile), prefill-sized batches, non-x86.

#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kBlock = 32;       // weights per block
constexpr int kBlockBytes = 20;  // fp16 d, fp16 m, 16 code bytes
constexpr int64_t kMaxRows = 8;  // activation rows one kernel call takes
constexpr int64_t kTile = 64;    // weight rows a prefill reuses from cache (64 x 576 weights: 23 KB)

constexpr int kLoSteps = 254;    // a residual's scale is d / 254: |residual| <= d / 2 fits in 127 steps

// Activations quantized to Q8_1, row-major: q (M, K) int8; d and s (M, K / 32). With the residual
// pass, lo (M, K) int8 holds x - d q in steps of d / 254, and s counts both. `unit` is the scale of
// the integer sum the kernels form: d (one pass) or d / 254 (two: 254 sum(c q) + sum(c lo)).
struct Q8Rows {
  std::vector<int8_t> q, lo;
  std::vector<float> d, unit, s;
};

// Rows r0.. of a Q8Rows in the kernels' order (kernel_order; lo is null without the residual pass):
// us holds each block's unit and s interleaved, so one load brings both of a pair of blocks.
struct Q8View {
  const int8_t* q;
  const int8_t* lo;
  const float* us;
};

// Q8Rows rearranged for the kernels: q and lo with each pair of blocks b, b + 1 as
// [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31] (an odd last block stays as it is), us = (unit, s).
struct KernelRows {
  std::vector<int8_t> q, lo;
  std::vector<float> us;
};

KernelRows kernel_order(const Q8Rows& a, int64_t m, int64_t k) {
  const int64_t nb = k / kBlock;
  auto pairs = [&](const std::vector<int8_t>& src) {
    std::vector<int8_t> dst(src);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t b = 0; b + 1 < nb; b += 2) {
        const int8_t* s = src.data() + r * k + b * kBlock;
        int8_t* d = dst.data() + r * k + b * kBlock;
        for (int half = 0; half < 2; ++half)    // low 16 of each block, then high 16
          for (int blk = 0; blk < 2; ++blk)
            std::memcpy(d + half * 32 + blk * 16, s + blk * kBlock + half * 16, 16);
      }
    return dst;
  };
  KernelRows out{pairs(a.q), a.lo.empty() ? std::vector<int8_t>() : pairs(a.lo), std::vector<float>(2 * m * nb)};
  for (int64_t i = 0; i < m * nb; ++i) out.us[2 * i] = a.unit[i], out.us[2 * i + 1] = a.s[i];
  return out;
}

// round-half-even(v), the default rounding mode, clamped to int8's symmetric range
int8_t to_int8(float v) { return static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0f, 127.0f)); }

// The readable quantizer: per 32-block, d = max|x| / 127 and q = round(x * (1 / d)) in fp32; with
// `residual`, r = x - d q and lo = round(r * (1 / (d / 254))). Step by step as solutions/q8_1.py
// does it, so the two agree bit for bit.
Q8Rows quantize_q8_1(const float* x, int64_t m, int64_t k, bool residual) {
  const int64_t nb = k / kBlock;
  Q8Rows out{std::vector<int8_t>(m * k), std::vector<int8_t>(residual ? m * k : 0), std::vector<float>(m * nb),
             std::vector<float>(m * nb), std::vector<float>(m * nb)};
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t at = r * k + b * kBlock;
      float amax = 0.0f;
      for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[at + j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int sum = 0, lo_sum = 0;
      for (int j = 0; j < kBlock; ++j) sum += out.q[at + j] = to_int8(x[at + j] * id);
      const float d_lo = d / kLoSteps;
      if (residual) {
        const float id_lo = d_lo != 0.0f ? 1.0f / d_lo : 0.0f;
        for (int j = 0; j < kBlock; ++j) {
          const float rest = x[at + j] - d * static_cast<float>(out.q[at + j]);
          lo_sum += out.lo[at + j] = to_int8(rest * id_lo);
        }
      }
      out.d[r * nb + b] = d;
      out.unit[r * nb + b] = residual ? d_lo : d;
      out.s[r * nb + b] = d * static_cast<float>(sum) + d_lo * static_cast<float>(lo_sum);
    }
  }
  return out;
}

// The three kernels, one namespace each, each compiled for its own target; q4_1_q8_1_rows.h is the
// loop they share, written once in terms of `dot` (acc + 32 unsigned codes x 32 signed bytes, 8 int32).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
inline __m256i dot(__m256i acc, __m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);  // no saturation: 2 * 15 * 127 < 2^15
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#include "q4_1_q8_1_rows.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
namespace avx512vnni {
inline __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#include "q4_1_q8_1_rows.h"
}  // namespace avx512vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace avxvnni {
inline __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#include "q4_1_q8_1_rows.h"
}  // namespace avxvnni
#pragma GCC pop_options

using RowsFn = void (*)(const uint8_t*, Q8View, float*, int64_t, int64_t, int64_t, int64_t);

template <int M, bool R>
RowsFn pick(const std::string& isa) {
  return isa == "avx2" ? avx2::rows<M, R> : isa == "avxvnni" ? avxvnni::rows<M, R> : avx512vnni::rows<M, R>;
}

template <bool R>
RowsFn pick_rows(int64_t m, const std::string& isa) {
  switch (m) {
    case 1: return pick<1, R>(isa);
    case 2: return pick<2, R>(isa);
    case 3: return pick<3, R>(isa);
    case 4: return pick<4, R>(isa);
    case 5: return pick<5, R>(isa);
    case 6: return pick<6, R>(isa);
    case 7: return pick<7, R>(isa);
    default: return pick<8, R>(isa);
  }
}

// The kernel for m activation rows (1..8) on instruction set `isa`, with or without the residual pass.
RowsFn kernel_for(int64_t m, const std::string& isa, bool residual) {
  return residual ? pick_rows<true>(m, isa) : pick_rows<false>(m, isa);
}

bool cpu_has(const std::string& isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == "avx2") return avx2;
  if (isa == "avx512vnni") return avx2 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  if (isa == "avxvnni") return avx2 && __builtin_cpu_supports("avxvnni");
  return false;
}

// The instruction sets this CPU can run, fastest first.
std::vector<std::string> isas() {
  std::vector<std::string> out;
  for (const char* isa : {"avx512vnni", "avxvnni", "avx2"})
    if (cpu_has(isa)) out.emplace_back(isa);
  return out;
}

// x (M, K) fp32 @ W.T for W (N, K) held as Q4_1 blocks (N, K / 32 * 20) uint8: y (M, N) fp32.
// The kernels take 1-8 activation rows (a decode step's batch); more rows (a prefill) go 8 at a time
// over a tile of weight rows, so the tile is read from memory once and from cache for the rest.
torch::Tensor matmul(const torch::Tensor& x, const torch::Tensor& blocks, const std::string& isa, bool residual) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D fp32 tensor; got ",
              x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == torch::kUInt8,
              "the Q4_1 weight must be a 2-D uint8 tensor of blocks; got ", blocks.sizes(), " ",
              blocks.scalar_type());
  const int64_t m = x.size(0), k = x.size(1), n = blocks.size(0);
  TORCH_CHECK(m >= 1, "x has no rows");
  TORCH_CHECK(k % kBlock == 0 && k > 0, "K must be a positive multiple of 32; got ", k);
  TORCH_CHECK(blocks.size(1) == k / kBlock * kBlockBytes, "the weight holds ", blocks.size(1),
              " bytes a row, but K = ", k, " needs ", k / kBlock * kBlockBytes);
  TORCH_CHECK(cpu_has(isa), "this CPU cannot run the ", isa, " kernel (it runs: ", c10::Join(", ", isas()), ")");
  const torch::Tensor xc = x.contiguous(), wc = blocks.contiguous();
  const KernelRows a = kernel_order(quantize_q8_1(xc.data_ptr<float>(), m, k, residual), m, k);
  torch::Tensor y = torch::empty({m, n}, x.options());
  const uint8_t* w = wc.data_ptr<uint8_t>();
  float* out = y.data_ptr<float>();
  const int64_t nb = k / kBlock;
  // at least 16 rows a task: below that, waking a thread costs more than the rows it would take
  at::parallel_for(0, n, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t t0 = n0; t0 < n1; t0 += kTile) {
      const int64_t t1 = std::min(n1, t0 + kTile);
      for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
        const int64_t rows = std::min(kMaxRows, m - r0);
        const Q8View view{a.q.data() + r0 * k, residual ? a.lo.data() + r0 * k : nullptr, a.us.data() + 2 * r0 * nb};
        kernel_for(rows, isa, residual)(w, view, out + r0 * n, t0, t1, n, k);
      }
    }
  });
  return y;
}

// The activation quantizer alone, for tests: [q, d, s], or [q, lo, d, s] with the residual pass.
std::vector<torch::Tensor> quantize(const torch::Tensor& x, bool residual) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.size(1) % kBlock == 0,
              "x must be a 2-D fp32 tensor with K a multiple of 32; got ", x.sizes(), " ", x.scalar_type());
  const torch::Tensor xc = x.contiguous();
  const int64_t m = x.size(0), k = x.size(1);
  Q8Rows a = quantize_q8_1(xc.data_ptr<float>(), m, k, residual);
  auto bytes = [&](std::vector<int8_t>& v) { return torch::from_blob(v.data(), {m, k}, torch::kInt8).clone(); };
  auto floats = [&](std::vector<float>& v) { return torch::from_blob(v.data(), {m, k / kBlock}, torch::kFloat32).clone(); };
  if (residual) return {bytes(a.q), bytes(a.lo), floats(a.d), floats(a.s)};
  return {bytes(a.q), floats(a.d), floats(a.s)};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "Q4_1 weights x Q8_1 activations (llama.cpp's arithmetic), 1-8 rows, x86 SIMD";
  module.def("isas", &isas, "the instruction sets this CPU can run, fastest first");
  module.def("matmul", &matmul, "x (M, K) fp32 @ W.T for W as Q4_1 blocks (N, K/32*20) uint8",
             pybind11::arg("x"), pybind11::arg("blocks"), pybind11::arg("isa"), pybind11::arg("residual"));
  module.def("quantize", &quantize, "x (M, K) fp32 as Q8_1: [q, d, s], or [q, lo, d, s] with the residual",
             pybind11::arg("x"), pybind11::arg("residual"));
}
