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
// the same arithmetic written plainly; this file is its fast form, split over output rows across torch's
// intra-op threads, and a whole decode step built on it (decode_step.h).
//
// The weights come tiled (solutions.q8_1.repack, done when the weights cache is built): 16 output
// rows' blocks side by side, so one `vpdpbusd` multiplies a 4-byte group of each of 16 rows by the
// activation's 4 bytes broadcast, and each lane sums one row (tiles_512.h, tiles_256.h). 16 is what a
// 512-bit register holds, not a tuned size; threads split the tiles evenly, and up to 8 activation rows
// share each unpacked tile-block.
//
// Instruction sets are chosen at run time: "avx512vnni" (vpdpbusd on 512-bit registers),
// "avxvnni" (the same instruction in its VEX form, on CPUs with AVX-VNNI but no AVX-512), and "avx2"
// (the floor: vpmaddubsw then vpmaddwd, two instructions where VNNI has one). Each kernel is compiled
// for its own target with a function attribute, so one build runs on any x86-64 CPU and `isas()` says
// which kernels this CPU can run.
// The file also holds the fp32 model's fused step (decode_step_f32.h, 1-8 rows), which shares the
// dispatch, the fp32 helpers and the build.
// The Q4_1 step (decode_step.h) takes one row on a contiguous cache, or a batch of rows on the paged
// cache's pool through their block tables (solutions.system.kernels.paged_step).
// Left out: AMX tiles (batch 1-8 gives too few rows to fill a tile), non-x86.

#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kBlock = 32;                                  // weights per block
constexpr int kBlockBytes = 20;                             // fp16 d, fp16 m, 16 code bytes
constexpr int kTileRows = 16;                               // output rows a tile interleaves
constexpr int kTileBlockBytes = kTileRows * kBlockBytes;    // 320
constexpr int64_t kMaxRows = 8;                             // activation rows one kernel pass takes
constexpr int64_t kMaxHeads = 128;                          // query heads the step's attention takes
constexpr int kLoSteps = 254;  // a residual's scale is d / 254: |residual| <= d / 2 fits in 127 steps

// Activations quantized to Q8_1, row-major: q (M, K) int8; d, unit and s (M, K / 32). With the residual
// pass, lo (M, K) int8 holds x - d q in steps of d / 254, and s counts both. `unit` is the scale of the
// integer sum the kernels form: d (one pass) or d / 254 (two: 254 sum(c q) + sum(c lo)).
struct Q8Buf {
  std::vector<int8_t> q, lo;
  std::vector<float> d, unit, s;
};

// Rows of a Q8Buf as the kernels read them (lo is null without the residual pass).
struct Acts {
  const int8_t* q;
  const int8_t* lo;
  const float* unit;
  const float* s;
  int64_t k;
};

Acts acts(const Q8Buf& a, int64_t k) {
  return {a.q.data(), a.lo.empty() ? nullptr : a.lo.data(), a.unit.data(), a.s.data(), k};
}

Acts rows_from(Acts a, int64_t r0) {
  const int64_t nb = a.k / kBlock;
  return {a.q + r0 * a.k, a.lo ? a.lo + r0 * a.k : nullptr, a.unit + r0 * nb, a.s + r0 * nb, a.k};
}

// round-half-even(v), the default rounding mode, clamped to int8's symmetric range
int8_t to_int8(float v) { return static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0f, 127.0f)); }

// The readable quantizer (each instruction set has its vectorized quantize_rows, tested against this):
// per 32-block, d = max|x| / 127 and q = round(x * (1 / d)) in fp32; with
// `residual`, r = x - d q and lo = round(r * (1 / (d / 254))). Step by step as solutions/q8_1.py
// does it, so the two agree bit for bit. Writes into `out`, grown as needed (a decode step reuses it).
void quantize_into(const float* x, int64_t m, int64_t k, bool residual, Q8Buf& out) {
  const int64_t nb = k / kBlock;
  out.q.resize(m * k);
  out.lo.resize(residual ? m * k : 0);
  out.d.resize(m * nb);
  out.unit.resize(m * nb);
  out.s.resize(m * nb);
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
}

// A tiled Q4_1 matrix (N, K): tiles (ceil(N / 16), K / 32, 320) bytes.
struct Matrix {
  const uint8_t* tiles;
  int64_t n, k;
};

// The weights of one layer, and of the model, as the fused step reads them (pointers into tensors the
// Decoder keeps alive).
struct LayerW {
  const float* attn_norm;
  const float* ffn_norm;
  Matrix wqkv, wo, gate_up, down;
};

struct Model {
  int64_t d, n_layers, n_heads, n_kv, head_dim, d_ff, vocab, max_seq, rescore;
  float eps;
  bool residual;
  std::vector<LayerW> layers;
  const float* norm;
  Matrix head;
  const uint8_t* embed;  // Q8_0 rows (vocab, d / 32 * 34)
  const float* cos;      // (max_seq, head_dim)
  const float* sin;      // signed, as model.rope_tables
};

// Where a step's keys and values live: kv head g of slot t in layer l has its keys at base + l * layer +
// t * slot + g * head and its values `value` floats further. Row r of a step holds lens[r] positions
// before it, position p in slot slots[r * width + p], and writes its new one at slot slots[r * width +
// lens[r]]. The paged cache's pool (n_layers, 2, slots, n_kv, hd) reads through its block tables; a
// contiguous cache (2, n_layers, 1, n_kv, max_len, hd) is the table 0, 1, 2, ...
struct KvAt {
  float* base;
  int64_t layer, value, slot, head;
  const int64_t* slots;  // (rows, width)
  int64_t width;
  const int64_t* lens;  // (rows,)
  bool shared = false;  // every row of one sequence (width 0): attention by torch's fused kernel
};

// A step's working memory, grown to the rows and positions of the largest step so far.
struct Scratch {
  std::vector<float> x, h, qkv, att, out, gu, act, tmp, scores;
  Q8Buf q8;
};

// The fp32 model for decode_step_f32.h: matrices in either memory order, the embedding doubling as
// the LM head (tied), as solutions/model.py's fp32 Llama holds them.
struct MatF32 {
  const float* w;
  int64_t n, k;
  bool col;  // stored column-major: (k, n) contiguous; else row-major (n, k)
};

struct LayerF32 {
  const float* attn_norm;
  const float* ffn_norm;
  MatF32 wqkv, wo, gate_up, down;
};

struct ModelF32 {
  int64_t d, n_layers, n_heads, n_kv, head_dim, d_ff, vocab, max_seq;
  float eps;
  std::vector<LayerF32> layers;
  const float* norm;
  MatF32 embed;  // (vocab, d): rows are tokens' embeddings, and the LM head's output rows
  const float* cos;
  const float* sin;
};

// A row of an fp32 step: its token, the sequence (cache row) it belongs to, and its position there.
struct RowF32 {
  int64_t token, seq, pos;
};

// An fp32 step's working memory for up to kMaxRows rows, allocated once.
struct ScratchF32 {
  std::vector<float> x, h, qkv, att, out, gu, act, tmp, scores;
};

// How far ahead of the block it multiplies a tile loop asks for weights (`prefetch`), in tile-blocks of
// 320 bytes; 0 asks for none. The hardware prefetcher alone leaves the stream of weights well under the
// memory's bandwidth on some CPUs, and the best distance depends on the CPU and its memory, so it is
// not a constant here: solutions.fused_step measures a few distances on the model's own weights when
// it loads and sets the fastest (set_prefetch). A prefetch never faults, even past the end.
std::atomic<int64_t> g_prefetch_blocks{0};


void set_prefetch(int64_t blocks) {
  TORCH_CHECK(blocks >= 0 && blocks <= 4096, "the prefetch distance must be 0..4096 tile-blocks, got ", blocks);
  g_prefetch_blocks.store(blocks);
}

// How many positions ahead of the one it reads the paged step's attention asks for a row's keys (then
// its values): 0 asks for none. A row's slots lie in blocks scattered over the pool, which the hardware
// prefetcher does not follow, and at 8 rows the keys and values no longer stay in cache between steps.
// Measured where the model loads, as the weights' distance is (solutions.system.kernels.fused_step).
std::atomic<int64_t> g_kv_prefetch{0};

void set_kv_prefetch(int64_t positions) {
  TORCH_CHECK(positions >= 0 && positions <= 4096,
              "the key and value prefetch distance must be 0..4096 positions, got ", positions);
  g_kv_prefetch.store(positions);
}

// The 5 cache lines of the tile-block `ahead` blocks after blk, asked for before their use (the address
// is formed as an integer: it may lie past the weights' end, where a prefetch does nothing). A volatile
// asm, not _mm_prefetch: at -O3 GCC 12 emitted no prefetch at all from _mm_prefetch or __builtin_prefetch
// in this file (objdump of the build: 0 prefetcht0; 520 at -O1), so every distance ran as 0.
inline void prefetch(const uint8_t* blk, int64_t ahead) {
  if (ahead == 0) return;
  const uintptr_t at = reinterpret_cast<uintptr_t>(blk) + static_cast<uintptr_t>(ahead) * kTileBlockBytes;
  for (int line = 0; line < kTileBlockBytes; line += 64)
    asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(at + line)));
}

using TilesFn = void (*)(const uint8_t*, Acts, float*, int64_t, int64_t, int64_t, int64_t);

// How many weight streams a thread's tile loop reads side by side (tiles_*.h's P), per activation-row
// count 1..kMaxRows: 1, 2 or 4 while P x M <= 8, the sums a loop keeps in registers. More streams keep
// more of memory's requests in flight at few rows, and cost registers and cache at more; which wins
// depends on the CPU, so solutions.system.kernels.fused_step measures each choice where the model loads
// and sets the fastest (set_streams). Until then each count reads one stream. Any choice gives the same
// sums bit for bit: it orders the tiles, not the arithmetic.
// The fp32 step's products (decode_step_f32.h's rows_f32) read J weight rows side by side the same way,
// J in 1, 2, 4 at every row count (their sums stay within 16 registers), measured likewise.
std::atomic<int> g_streams[kMaxRows + 1] = {};      // 0: one stream
std::atomic<int> g_streams_f32[kMaxRows + 1] = {};  // 0: one stream

std::vector<int64_t> stream_choices(int64_t rows, bool f32) {
  TORCH_CHECK(rows >= 1 && rows <= kMaxRows, "rows must be 1..", kMaxRows, ", got ", rows);
  std::vector<int64_t> out;
  for (int64_t p : {1, 2, 4})
    if (f32 || p * rows <= kMaxRows) out.push_back(p);
  return out;
}

void set_streams(int64_t rows, int64_t p, bool f32) {
  const std::vector<int64_t> ok = stream_choices(rows, f32);
  TORCH_CHECK(std::find(ok.begin(), ok.end(), p) != ok.end(), f32 ? "the fp32 product" : "a tile loop",
              " over ", rows, " rows reads 1, 2 or 4 streams", f32 ? "" : " with streams x rows <= 8", ", got ", p);
  (f32 ? g_streams_f32 : g_streams)[rows].store(static_cast<int>(p));
}

int64_t streams(int64_t rows, bool f32) {
  TORCH_CHECK(rows >= 1 && rows <= kMaxRows, "rows must be 1..", kMaxRows, ", got ", rows);
  return std::max(1, (f32 ? g_streams_f32 : g_streams)[rows].load(std::memory_order_relaxed));
}

// The kernels, the product and the fused step, one namespace per instruction set, each compiled for
// its own target with a function attribute: tiles_*.h is the tile loop, decode_step.h the step.
#define DOJO_PRODUCT_AND_STEP                                                                           \
  template <int M, bool R>                                                                              \
  TilesFn with_streams(int p) {                                                                         \
    if constexpr (4 * M <= kMaxRows)                                                                    \
      if (p == 4) return tiles<M, R, 4>;                                                                \
    if constexpr (2 * M <= kMaxRows)                                                                    \
      if (p == 2) return tiles<M, R, 2>;                                                                \
    return tiles<M, R, 1>;                                                                              \
  }                                                                                                     \
  template <bool R>                                                                                     \
  TilesFn pick(int64_t m) {                                                                             \
    const int p = g_streams[std::min(m, kMaxRows)].load(std::memory_order_relaxed);                     \
    switch (m) {                                                                                        \
      case 1: return with_streams<1, R>(p);                                                             \
      case 2: return with_streams<2, R>(p);                                                             \
      case 3: return with_streams<3, R>(p);                                                             \
      case 4: return with_streams<4, R>(p);                                                             \
      case 5: return with_streams<5, R>(p);                                                             \
      case 6: return with_streams<6, R>(p);                                                             \
      case 7: return with_streams<7, R>(p);                                                             \
      default: return with_streams<8, R>(p);                                                            \
    }                                                                                                   \
  }                                                                                                     \
  /* x (m, k) as Q8_1 into out: the readable quantize_into, vectorized (bit for bit the same) */        \
  void quantize_rows(const float* x, int64_t m, int64_t k, bool residual, Q8Buf& out) {                 \
    const int64_t nb = k / kBlock;                                                                      \
    out.q.resize(m * k), out.lo.resize(residual ? m * k : 0);                                           \
    out.d.resize(m * nb), out.unit.resize(m * nb), out.s.resize(m * nb);                                \
    for (int64_t i = 0; i < m * nb; ++i) {                                                              \
      int sum_q, sum_lo;                                                                                \
      float d;                                                                                          \
      quantize_block(x + i * kBlock, residual, out.q.data() + i * kBlock,                               \
                     residual ? out.lo.data() + i * kBlock : nullptr, &d, &sum_q, &sum_lo);             \
      const float d_lo = d / kLoSteps;                                                                  \
      out.d[i] = d, out.unit[i] = residual ? d_lo : d;                                                  \
      out.s[i] = d * static_cast<float>(sum_q) + d_lo * static_cast<float>(sum_lo);                     \
    }                                                                                                   \
  }                                                                                                     \
  /* y (m, n) = activations a (m rows) @ W.T; tiles split evenly over torch's threads; more than 8 */   \
  /* rows go 8 at a time over each tile, so a tile is read from memory once and from cache after. */    \
  void product(const uint8_t* w, Acts a, int64_t m, int64_t n, int64_t k, float* y, bool residual) {    \
    const int64_t ntiles = (n + kTileRows - 1) / kTileRows;                                             \
    const int64_t threads = std::max<int64_t>(1, at::get_num_threads());                                \
    const int64_t chunk = (ntiles + threads - 1) / threads;                                             \
    at::parallel_for(0, ntiles, chunk, [&](int64_t t0, int64_t t1) {                                    \
      if (m <= kMaxRows) {                                                                              \
        (residual ? pick<true>(m) : pick<false>(m))(w, a, y, n, t0, t1, n);                             \
      } else {                                                                                          \
        for (int64_t t = t0; t < t1; ++t)                                                               \
          for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {                                                \
            const int64_t rows = std::min(kMaxRows, m - r0);                                            \
            (residual ? pick<true>(rows) : pick<false>(rows))(w, rows_from(a, r0), y + r0 * n, n, t, t + 1, n); \
          }                                                                                             \
      }                                                                                                 \
    });                                                                                                 \
  }

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
inline __m256i dot(__m256i acc, __m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);  // no saturation: 2 * 15 * 127 < 2^15
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#include "tiles_256.h"
DOJO_PRODUCT_AND_STEP
#include "decode_step.h"
#include "decode_step_f32.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace avxvnni {
inline __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#include "tiles_256.h"
DOJO_PRODUCT_AND_STEP
#include "decode_step.h"
#include "decode_step_f32.h"
}  // namespace avxvnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace avx512vnni {
#include "tiles_512.h"
DOJO_PRODUCT_AND_STEP
#include "decode_step.h"
#include "decode_step_f32.h"
}  // namespace avx512vnni
#pragma GCC pop_options

using ProductFn = void (*)(const uint8_t*, Acts, int64_t, int64_t, int64_t, float*, bool);
using QuantizeFn = void (*)(const float*, int64_t, int64_t, bool, Q8Buf&);
using StepFn = void (*)(const Model&, Scratch&, const int64_t*, int64_t, const KvAt&, int64_t, float*);

bool cpu_has(const std::string& isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == "avx2") return avx2;
  if (isa == "avx512vnni")
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
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

void check_isa(const std::string& isa) {
  TORCH_CHECK(cpu_has(isa), "this CPU cannot run the ", isa, " kernel (it runs: ", c10::Join(", ", isas()), ")");
}

// Block sums a second (one tile-block, 16 rows x 32 codes, against one activation row's 32 bytes: one
// pass, 8 vpdpbusd on 512-bit registers) on the calling thread at `isa`, from 8 independent chains
// for at least `seconds`: the most the tile loop can do a thread, whatever memory gives.
double roof(const std::string& isa, double seconds) {
  check_isa(isa);
  TORCH_CHECK(seconds > 0 && seconds <= 10, "seconds must be in (0, 10], got ", seconds);
  alignas(64) uint8_t blk[kTileBlockBytes];
  alignas(64) int8_t q[8 * kBlock];
  for (int i = 0; i < kTileBlockBytes; ++i) blk[i] = static_cast<uint8_t>(i * 37 % 251);
  for (int i = 0; i < 8 * kBlock; ++i) q[i] = static_cast<int8_t>(i * 53 % 255 - 127);
  auto loop = isa == "avx512vnni" ? avx512vnni::roof_loop : isa == "avxvnni" ? avxvnni::roof_loop : avx2::roof_loop;
  volatile int64_t sink = 0;
  int64_t n = 1024, done = 0;
  const auto start = std::chrono::steady_clock::now();
  double spent = 0;
  while (spent < seconds) {
    sink = sink + loop(n, blk, q);
    done += n;
    spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    n *= 2;
  }
  return 8.0 * static_cast<double>(done) / spent;
}

ProductFn product_for(const std::string& isa) {
  return isa == "avx2" ? avx2::product : isa == "avxvnni" ? avxvnni::product : avx512vnni::product;
}

QuantizeFn quantize_for(const std::string& isa) {
  if (isa == "readable") return quantize_into;
  return isa == "avx2" ? avx2::quantize_rows : isa == "avxvnni" ? avxvnni::quantize_rows : avx512vnni::quantize_rows;
}

StepFn step_for(const std::string& isa) {
  return isa == "avx2" ? avx2::step : isa == "avxvnni" ? avxvnni::step : avx512vnni::step;
}

using StepF32Fn = void (*)(const ModelF32&, ScratchF32&, const RowF32*, int64_t, float*, int64_t, int64_t, float*);

StepF32Fn step_f32_for(const std::string& isa) {
  return isa == "avx2" ? avx2::step_f32 : isa == "avxvnni" ? avxvnni::step_f32 : avx512vnni::step_f32;
}

// A tiled weight's checks: uint8 (T, K / 32, 320) holding n rows; K from the tiles.
int64_t check_tiles(const torch::Tensor& tiles, int64_t n, const char* what) {
  TORCH_CHECK(tiles.dim() == 3 && tiles.scalar_type() == torch::kUInt8 && tiles.size(2) == kTileBlockBytes,
              what, " must be Q4_1 tiles (N / 16, K / 32, 320) uint8 (solutions.q8_1.repack); got ",
              tiles.sizes(), " ", tiles.scalar_type());
  TORCH_CHECK(tiles.is_contiguous(), what, " must be contiguous");
  TORCH_CHECK(n > (tiles.size(0) - 1) * kTileRows && n <= tiles.size(0) * kTileRows, what, ": ", tiles.size(0),
              " tiles hold ", (tiles.size(0) - 1) * kTileRows + 1, "..", tiles.size(0) * kTileRows,
              " rows, not ", n);
  return tiles.size(1) * kBlock;
}

// x (M, K) fp32 @ W.T for W (n, K) held as tiles: y (M, n) fp32.
torch::Tensor matmul(const torch::Tensor& x, const torch::Tensor& tiles, int64_t n, const std::string& isa,
                     bool residual) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D fp32 tensor; got ",
              x.sizes(), " ", x.scalar_type());
  const int64_t k = check_tiles(tiles, n, "the weight"), m = x.size(0);
  TORCH_CHECK(m >= 1, "x has no rows");
  TORCH_CHECK(x.size(1) == k, "x has ", x.size(1), " columns, but the weight's K is ", k);
  check_isa(isa);
  const torch::Tensor xc = x.contiguous();
  Q8Buf a;
  quantize_for(isa)(xc.data_ptr<float>(), m, k, residual, a);
  torch::Tensor y = torch::empty({m, n}, x.options());
  product_for(isa)(tiles.data_ptr<uint8_t>(), acts(a, k), m, n, k, y.data_ptr<float>(), residual);
  return y;
}

// The activation quantizer alone, for tests: [q, d, s], or [q, lo, d, s] with the residual pass; isa
// names the vectorized one to run, or "readable" for quantize_into.
std::vector<torch::Tensor> quantize(const torch::Tensor& x, bool residual, const std::string& isa) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.size(1) % kBlock == 0,
              "x must be a 2-D fp32 tensor with K a multiple of 32; got ", x.sizes(), " ", x.scalar_type());
  if (isa != "readable") check_isa(isa);
  const torch::Tensor xc = x.contiguous();
  const int64_t m = x.size(0), k = x.size(1);
  Q8Buf a;
  quantize_for(isa)(xc.data_ptr<float>(), m, k, residual, a);
  auto bytes = [&](std::vector<int8_t>& v) { return torch::from_blob(v.data(), {m, k}, torch::kInt8).clone(); };
  auto floats = [&](std::vector<float>& v) { return torch::from_blob(v.data(), {m, k / kBlock}, torch::kFloat32).clone(); };
  if (residual) return {bytes(a.q), bytes(a.lo), floats(a.d), floats(a.s)};
  return {bytes(a.q), floats(a.d), floats(a.s)};
}

// What both decoders check and keep alive of the tensors they point into: an fp32 vector of n, the
// norms' and matrices' counts, each layer's two norms and four matrices (made by `mat`), and the RoPE
// tables (max_seq, head_dim).
const float* keep_vector(std::vector<torch::Tensor>& keep, const torch::Tensor& t, int64_t n, const char* what) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == n && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), what,
              " must be a contiguous fp32 vector of ", n);
  keep.push_back(t);
  return t.data_ptr<float>();
}

template <typename Layer, typename MatFn>
std::vector<Layer> keep_layers(std::vector<torch::Tensor>& keep, const std::vector<torch::Tensor>& norms,
                               const std::vector<torch::Tensor>& mats, int64_t n_layers, int64_t extra_mats,
                               int64_t d, int64_t qkv, int64_t d_ff, MatFn mat) {
  TORCH_CHECK(static_cast<int64_t>(norms.size()) == 2 * n_layers + 1, "expected ", 2 * n_layers + 1, " norms, got ",
              norms.size());
  TORCH_CHECK(static_cast<int64_t>(mats.size()) == 4 * n_layers + extra_mats, "expected ", 4 * n_layers + extra_mats,
              " matrices, got ", mats.size());
  std::vector<Layer> layers;
  for (int64_t l = 0; l < n_layers; ++l) {
    layers.push_back({keep_vector(keep, norms[2 * l], d, "attn_norm"), keep_vector(keep, norms[2 * l + 1], d, "ffn_norm"),
                      mat(mats[4 * l], qkv, d, "wqkv"), mat(mats[4 * l + 1], d, d, "wo"),
                      mat(mats[4 * l + 2], 2 * d_ff, d, "w_gate_up"), mat(mats[4 * l + 3], d, d_ff, "w_down")});
  }
  return layers;
}

void keep_rope(std::vector<torch::Tensor>& keep, const torch::Tensor& cos, const torch::Tensor& sin, int64_t max_seq,
               int64_t hd, const float** cos_out, const float** sin_out) {
  for (const auto& t : {cos, sin})
    TORCH_CHECK(t.dim() == 2 && t.size(0) == max_seq && t.size(1) == hd && t.is_contiguous() &&
                    t.scalar_type() == torch::kFloat32,
                "the RoPE tables must be contiguous fp32 (max_seq, head_dim)");
  keep.push_back(cos), keep.push_back(sin);
  *cos_out = cos.data_ptr<float>(), *sin_out = sin.data_ptr<float>();
}

// A Llama model's weights, held for the fused decode step (decode_step.h): one row on a contiguous cache,
// or a batch of rows on the paged cache's pool.
class Decoder {
 public:
  // config: d, n_layers, n_heads, n_kv_heads, head_dim, d_ff, vocab, max_seq, rescore; norms: each
  // layer's attn_norm and ffn_norm, then the final norm (fp32); mats: each layer's wqkv, wo, w_gate_up,
  // w_down, then the LM head (tiles); embed: Q8_0 rows (vocab, d / 32 * 34) uint8; cos, sin
  // (max_seq, head_dim) fp32.
  Decoder(std::vector<int64_t> config, double eps, bool residual, std::vector<torch::Tensor> norms,
          std::vector<torch::Tensor> mats, torch::Tensor embed, torch::Tensor cos, torch::Tensor sin,
          const std::string& isa)
      : step_(step_for(isa)) {
    TORCH_CHECK(config.size() == 9, "config must hold 9 sizes, got ", config.size());
    check_isa(isa);
    Model& m = model_;
    m.d = config[0], m.n_layers = config[1], m.n_heads = config[2], m.n_kv = config[3], m.head_dim = config[4];
    m.d_ff = config[5], m.vocab = config[6], m.max_seq = config[7], m.rescore = config[8];
    m.eps = static_cast<float>(eps), m.residual = residual;
    TORCH_CHECK(m.d % kBlock == 0 && m.d_ff % kBlock == 0 && m.n_heads % m.n_kv == 0 && m.head_dim % 2 == 0 &&
                    m.rescore >= 1 && m.rescore <= m.vocab,
                "unsupported sizes: d and d_ff must be multiples of 32, n_heads a multiple of n_kv_heads, "
                "head_dim even, 1 <= rescore <= vocab");
    auto mat = [&](const torch::Tensor& t, int64_t n, int64_t k, const char* what) {
      TORCH_CHECK(check_tiles(t, n, what) == k, what, " has K = ", t.size(1) * kBlock, ", expected ", k);
      keep_.push_back(t);
      return Matrix{t.data_ptr<uint8_t>(), n, k};
    };
    const int64_t hd = m.head_dim, qkv = (m.n_heads + 2 * m.n_kv) * hd;
    TORCH_CHECK(m.n_heads * hd == m.d, "n_heads * head_dim must be d");
    TORCH_CHECK(m.n_heads <= kMaxHeads, "the fused step takes at most ", kMaxHeads, " query heads, got ", m.n_heads);
    m.layers = keep_layers<LayerW>(keep_, norms, mats, m.n_layers, 1, m.d, qkv, m.d_ff, mat);
    m.norm = keep_vector(keep_, norms.back(), m.d, "the final norm");
    m.head = mat(mats.back(), m.vocab, m.d, "the LM head");
    TORCH_CHECK(embed.dim() == 2 && embed.scalar_type() == torch::kUInt8 && embed.is_contiguous() &&
                    embed.size(0) == m.vocab && embed.size(1) == m.d / kBlock * 34,
                "embed must be contiguous Q8_0 rows (vocab, d / 32 * 34) uint8; got ", embed.sizes());
    keep_.push_back(embed);
    m.embed = embed.data_ptr<uint8_t>();
    keep_rope(keep_, cos, sin, m.max_seq, hd, &m.cos, &m.sin);
    scratch_.tmp.resize(hd);
  }

  // Logits (vocab) after `token`, its keys and values written at position `pos` of kv (2, n_layers, 1,
  // n_kv_heads, max_len, head_dim) fp32, which holds positions 0..pos-1.
  torch::Tensor step(int64_t token, torch::Tensor kv, int64_t pos) {
    const Model& m = model_;
    TORCH_CHECK(token >= 0 && token < m.vocab, "token ", token, " is not in [0, ", m.vocab, ")");
    TORCH_CHECK(kv.dim() == 6 && kv.scalar_type() == torch::kFloat32 && kv.is_contiguous() && kv.size(0) == 2 &&
                    kv.size(1) == m.n_layers && kv.size(2) == 1 && kv.size(3) == m.n_kv &&
                    kv.size(5) == m.head_dim,
                "the cache must be contiguous fp32 (2, n_layers, 1, n_kv_heads, max_len, head_dim); got ",
                kv.sizes());
    const int64_t max_len = kv.size(4), hd = m.head_dim;
    TORCH_CHECK(pos >= 0 && pos < max_len && pos < m.max_seq, "position ", pos, " is past the cache (",
                max_len, ") or the context (", m.max_seq, ")");
    torch::Tensor logits = torch::empty({m.vocab}, torch::kFloat32);
    const std::lock_guard<std::mutex> one_at_a_time(busy_);  // one scratch: a second thread waits its turn
    while (static_cast<int64_t>(iota_.size()) <= pos) iota_.push_back(static_cast<int64_t>(iota_.size()));
    const KvAt at{kv.data_ptr<float>(), m.n_kv * max_len * hd, m.n_layers * m.n_kv * max_len * hd, hd,
                  max_len * hd, iota_.data(), 0, &pos};
    grow(1, pos + 1);
    step_(m, scratch_, &token, 1, at, 1, logits.data_ptr<float>());
    return logits;
  }

  // Logits (rows, vocab) after tokens (rows,), each row a sequence of the paged cache's pool (n_layers,
  // 2, n_slots, n_kv_heads, head_dim) fp32: row r holds lens[r] positions, position p in slot
  // slots[r, p], and its new token's keys and values go to slot slots[r, lens[r]].
  torch::Tensor step_paged(torch::Tensor tokens, torch::Tensor pool, torch::Tensor slots, torch::Tensor lens) {
    const Model& m = model_;
    TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == torch::kLong && tokens.is_contiguous() &&
                    tokens.size(0) >= 1,
                "tokens must be a contiguous int64 vector of 1 or more rows; got ", tokens.sizes());
    const int64_t rows = tokens.size(0);
    check_pool(pool);
    TORCH_CHECK(slots.dim() == 2 && slots.scalar_type() == torch::kLong && slots.is_contiguous() &&
                    slots.size(0) == rows && slots.size(1) >= 1,
                "slots must be contiguous int64 (rows, width); got ", slots.sizes());
    TORCH_CHECK(lens.dim() == 1 && lens.scalar_type() == torch::kLong && lens.is_contiguous() && lens.size(0) == rows,
                "lens must be a contiguous int64 vector of one length a row; got ", lens.sizes());
    const int64_t n_slots = pool.size(2), width = slots.size(1), hd = m.head_dim;
    const int64_t* tk = tokens.data_ptr<int64_t>();
    const int64_t* sl = slots.data_ptr<int64_t>();
    const int64_t* ln = lens.data_ptr<int64_t>();
    int64_t t_max = 0;
    for (int64_t r = 0; r < rows; ++r) {
      TORCH_CHECK(tk[r] >= 0 && tk[r] < m.vocab, "token ", tk[r], " of row ", r, " is not in [0, ", m.vocab, ")");
      TORCH_CHECK(ln[r] >= 0 && ln[r] < width && ln[r] < m.max_seq, "row ", r, " holds ", ln[r],
                  " positions: its new one is past the slots given (", width, ") or the context (", m.max_seq, ")");
      for (int64_t p = 0; p <= ln[r]; ++p)
        TORCH_CHECK(sl[r * width + p] >= 0 && sl[r * width + p] < n_slots, "slot ", sl[r * width + p], " of row ",
                    r, " is not in the pool's [0, ", n_slots, ")");
      t_max = std::max(t_max, ln[r] + 1);
    }
    torch::Tensor logits = torch::empty({rows, m.vocab}, torch::kFloat32);
    const KvAt at{pool.data_ptr<float>(), 2 * n_slots * m.n_kv * hd, n_slots * m.n_kv * hd, m.n_kv * hd, hd, sl,
                  width, ln};
    const std::lock_guard<std::mutex> one_at_a_time(busy_);
    grow(rows, t_max);
    step_(m, scratch_, tk, rows, at, rows, logits.data_ptr<float>());
    return logits;
  }

  // Logits (T, vocab), or with last_only (1, vocab), after each of tokens (T,) of one sequence of the
  // pool (as step_paged's): it holds `start` positions, position p in slot table[p], and the tokens go
  // to slots table[start..start + T - 1], each attending to the positions up to its own. A chunk of a
  // prefill in one call: every weight read once for the T rows.
  torch::Tensor prefill_paged(torch::Tensor tokens, torch::Tensor pool, torch::Tensor table, int64_t start,
                              bool last_only) {
    const Model& m = model_;
    TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == torch::kLong && tokens.is_contiguous() &&
                    tokens.size(0) >= 1,
                "tokens must be a contiguous int64 vector of 1 or more tokens; got ", tokens.sizes());
    check_pool(pool);
    const int64_t rows = tokens.size(0), n_slots = pool.size(2), hd = m.head_dim;
    TORCH_CHECK(table.dim() == 1 && table.scalar_type() == torch::kLong && table.is_contiguous(),
                "table must be a contiguous int64 vector; got ", table.sizes());
    TORCH_CHECK(start >= 0 && start + rows <= table.size(0) && start + rows <= m.max_seq, "positions ", start,
                "..", start + rows - 1, " are past the table (", table.size(0), ") or the context (", m.max_seq, ")");
    const int64_t* tk = tokens.data_ptr<int64_t>();
    const int64_t* sl = table.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r)
      TORCH_CHECK(tk[r] >= 0 && tk[r] < m.vocab, "token ", tk[r], " at ", r, " is not in [0, ", m.vocab, ")");
    for (int64_t p = 0; p < start + rows; ++p)
      TORCH_CHECK(sl[p] >= 0 && sl[p] < n_slots, "slot ", sl[p], " is not in the pool's [0, ", n_slots, ")");
    std::vector<int64_t> lens(rows);
    for (int64_t r = 0; r < rows; ++r) lens[r] = start + r;
    const int64_t head_rows = last_only ? 1 : rows;
    torch::Tensor logits = torch::empty({head_rows, m.vocab}, torch::kFloat32);
    const KvAt at{pool.data_ptr<float>(), 2 * n_slots * m.n_kv * hd, n_slots * m.n_kv * hd, m.n_kv * hd, hd, sl,
                  0, lens.data(), true};
    const std::lock_guard<std::mutex> one_at_a_time(busy_);
    grow(rows, 0);
    step_(m, scratch_, tk, rows, at, head_rows, logits.data_ptr<float>());
    return logits;
  }

 private:
  void check_pool(const torch::Tensor& pool) const {
    const Model& m = model_;
    TORCH_CHECK(pool.dim() == 5 && pool.scalar_type() == torch::kFloat32 && pool.is_contiguous() &&
                    pool.size(0) == m.n_layers && pool.size(1) == 2 && pool.size(3) == m.n_kv &&
                    pool.size(4) == m.head_dim,
                "the pool must be contiguous fp32 (n_layers, 2, slots, n_kv_heads, head_dim); got ", pool.sizes());
  }

  // The scratch for `rows` rows, and scores for each attending to up to t_max positions (grown, never
  // shrunk; a prefill's attention, by torch's kernel, needs none: t_max 0).
  void grow(int64_t rows, int64_t t_max) {
    const Model& m = model_;
    Scratch& s = scratch_;
    const int64_t qkv = (m.n_heads + 2 * m.n_kv) * m.head_dim;
    if (static_cast<int64_t>(s.x.size()) < rows * m.d) {
      s.x.resize(rows * m.d), s.h.resize(rows * m.d), s.qkv.resize(rows * qkv), s.att.resize(rows * m.d);
      s.out.resize(rows * m.d), s.gu.resize(rows * 2 * m.d_ff), s.act.resize(rows * m.d_ff);
    }
    if (static_cast<int64_t>(s.scores.size()) < rows * m.n_heads * t_max)
      s.scores.resize(std::max<int64_t>(rows * m.n_heads * t_max, 2 * static_cast<int64_t>(s.scores.size())));
  }

  StepFn step_;
  Model model_;
  Scratch scratch_;
  std::mutex busy_;
  std::vector<int64_t> iota_;  // 0, 1, 2, ...: a contiguous cache's slots
  std::vector<torch::Tensor> keep_;  // the tensors model_ points into
};

using GemvF32Fn = void (*)(const MatF32&, const float*, int64_t, float*);

GemvF32Fn gemv_f32_for(const std::string& isa) {
  return isa == "avx2" ? avx2::gemv_f32 : isa == "avxvnni" ? avxvnni::gemv_f32 : avx512vnni::gemv_f32;
}

// x (M, K) fp32 @ W.T for an fp32 W (N, K), row-major or the transpose of a contiguous (K, N), with the
// fused fp32 step's product (M at most 8): for tests, against F.linear.
torch::Tensor matmul_f32(const torch::Tensor& x, const torch::Tensor& w, const std::string& isa) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.size(0) >= 1 && x.size(0) <= kMaxRows,
              "x must be a 2-D fp32 tensor of 1..", kMaxRows, " rows; got ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.size(1) == x.size(1),
              "w must be fp32 (N, ", x.size(1), "); got ", w.sizes(), " ", w.scalar_type());
  const int64_t n = w.size(0), k = w.size(1);
  const bool row = w.stride(0) == k && w.stride(1) == 1, col = w.stride(0) == 1 && w.stride(1) == n;
  TORCH_CHECK(row || col, "w must be row-major or the transpose of a contiguous matrix; strides ", w.strides());
  check_isa(isa);
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty({x.size(0), n}, x.options());
  gemv_f32_for(isa)(MatF32{w.data_ptr<float>(), n, k, !row}, xc.data_ptr<float>(), x.size(0), y.data_ptr<float>());
  return y;
}

// A Llama model's fp32 weights, held for the fused decode step at 1..8 rows (decode_step_f32.h).
class DecoderF32 {
 public:
  // config: d, n_layers, n_heads, n_kv_heads, head_dim, d_ff, vocab, max_seq; norms: each layer's
  // attn_norm and ffn_norm, then the final norm; mats: each layer's wqkv, wo, w_gate_up, w_down as
  // (N, K) fp32 views, each row-major or column-major (the transpose of a contiguous (K, N)); embed:
  // (vocab, d), the same; cos, sin (max_seq, head_dim) fp32.
  DecoderF32(std::vector<int64_t> config, double eps, std::vector<torch::Tensor> norms,
             std::vector<torch::Tensor> mats, torch::Tensor embed, torch::Tensor cos, torch::Tensor sin,
             const std::string& isa)
      : step_(step_f32_for(isa)) {
    TORCH_CHECK(config.size() == 8, "config must hold 8 sizes, got ", config.size());
    check_isa(isa);
    ModelF32& m = model_;
    m.d = config[0], m.n_layers = config[1], m.n_heads = config[2], m.n_kv = config[3], m.head_dim = config[4];
    m.d_ff = config[5], m.vocab = config[6], m.max_seq = config[7];
    m.eps = static_cast<float>(eps);
    TORCH_CHECK(m.d > 0 && m.n_layers > 0 && m.n_kv > 0 && m.n_heads % m.n_kv == 0 && m.head_dim % 2 == 0 &&
                    m.n_heads * m.head_dim == m.d && m.d_ff > 0 && m.vocab > 0 && m.max_seq > 0,
                "unsupported sizes: n_heads must be a multiple of n_kv_heads, head_dim even, n_heads * head_dim = d");
    auto mat = [&](const torch::Tensor& t, int64_t n, int64_t k, const char* what) {
      TORCH_CHECK(t.dim() == 2 && t.scalar_type() == torch::kFloat32 && t.size(0) == n && t.size(1) == k, what,
                  " must be fp32 (", n, ", ", k, "); got ", t.sizes(), " ", t.scalar_type());
      const bool row = t.stride(0) == k && t.stride(1) == 1, col = t.stride(0) == 1 && t.stride(1) == n;
      TORCH_CHECK(row || col, what, " must be row-major or the transpose of a contiguous matrix; strides ",
                  t.strides());
      keep_.push_back(t);
      return MatF32{t.data_ptr<float>(), n, k, !row};
    };
    const int64_t hd = m.head_dim, qkv = (m.n_heads + 2 * m.n_kv) * hd;
    m.layers = keep_layers<LayerF32>(keep_, norms, mats, m.n_layers, 0, m.d, qkv, m.d_ff, mat);
    m.norm = keep_vector(keep_, norms.back(), m.d, "the final norm");
    m.embed = mat(embed, m.vocab, m.d, "the embedding");
    keep_rope(keep_, cos, sin, m.max_seq, hd, &m.cos, &m.sin);
    ScratchF32& s = scratch_;
    const int64_t r = kMaxRows;
    s.x.resize(r * m.d), s.h.resize(r * m.d), s.qkv.resize(r * qkv), s.att.resize(r * m.d), s.out.resize(r * m.d);
    s.gu.resize(r * 2 * m.d_ff), s.act.resize(r * m.d_ff), s.tmp.resize(hd);
  }

  // Logits (rows, vocab) after tokens (rows,) int64, 1 <= rows <= 8, one a sequence, their keys and
  // values written at position `pos` of kv (2, n_layers, rows, n_kv_heads, max_len, head_dim) fp32,
  // which holds positions 0..pos-1 of every sequence.
  torch::Tensor step(torch::Tensor tokens, torch::Tensor kv, int64_t pos) {
    const int64_t rows = check_tokens(tokens);
    check_cache(kv, rows, pos + 1);
    std::vector<RowF32> rs;
    const int64_t* t = tokens.data_ptr<int64_t>();
    for (int64_t b = 0; b < rows; ++b) rs.push_back({t[b], b, pos});
    return run(rs, kv);
  }

  // Logits (T, vocab) after each of tokens (T,) int64, 1 <= T <= 8, consecutive tokens of one
  // sequence, their keys and values written at positions pos..pos+T-1 of kv (2, n_layers, 1,
  // n_kv_heads, max_len, head_dim) fp32, which holds positions 0..pos-1: a short prefill.
  torch::Tensor chunk(torch::Tensor tokens, torch::Tensor kv, int64_t pos) {
    const int64_t rows = check_tokens(tokens);
    check_cache(kv, 1, pos + rows);
    std::vector<RowF32> rs;
    const int64_t* t = tokens.data_ptr<int64_t>();
    for (int64_t i = 0; i < rows; ++i) rs.push_back({t[i], 0, pos + i});
    return run(rs, kv);
  }

 private:
  int64_t check_tokens(const torch::Tensor& tokens) const {
    TORCH_CHECK(tokens.dim() == 1 && tokens.scalar_type() == torch::kInt64 && tokens.is_contiguous() &&
                    tokens.size(0) >= 1 && tokens.size(0) <= kMaxRows,
                "tokens must be a contiguous int64 vector of 1..", kMaxRows, " ids; got ", tokens.sizes(), " ",
                tokens.scalar_type());
    const int64_t* t = tokens.data_ptr<int64_t>();
    for (int64_t i = 0; i < tokens.size(0); ++i)
      TORCH_CHECK(t[i] >= 0 && t[i] < model_.vocab, "token ", t[i], " is not in [0, ", model_.vocab, ")");
    return tokens.size(0);
  }

  // kv must hold n_seq sequences and `end` positions (the last one written is end - 1).
  void check_cache(const torch::Tensor& kv, int64_t n_seq, int64_t end) const {
    const ModelF32& m = model_;
    TORCH_CHECK(kv.dim() == 6 && kv.scalar_type() == torch::kFloat32 && kv.is_contiguous() && kv.size(0) == 2 &&
                    kv.size(1) == m.n_layers && kv.size(2) == n_seq && kv.size(3) == m.n_kv &&
                    kv.size(5) == m.head_dim,
                "the cache must be contiguous fp32 (2, n_layers, ", n_seq, ", n_kv_heads, max_len, head_dim); got ",
                kv.sizes());
    TORCH_CHECK(end >= 1 && end <= kv.size(4) && end <= m.max_seq, "positions up to ", end - 1,
                " are past the cache (", kv.size(4), ") or the context (", m.max_seq, ")");
  }

  torch::Tensor run(const std::vector<RowF32>& rs, const torch::Tensor& kv) {
    const ModelF32& m = model_;
    const int64_t rows = static_cast<int64_t>(rs.size());
    int64_t t_max = 0;
    for (const RowF32& r : rs) t_max = std::max(t_max, r.pos + 1);
    torch::Tensor logits = torch::empty({rows, m.vocab}, torch::kFloat32);
    const std::lock_guard<std::mutex> one_at_a_time(busy_);
    const int64_t need = kMaxRows * m.n_heads * t_max;
    if (static_cast<int64_t>(scratch_.scores.size()) < need)
      scratch_.scores.resize(std::max(need, 2 * static_cast<int64_t>(scratch_.scores.size())));
    step_(m, scratch_, rs.data(), rows, kv.data_ptr<float>(), kv.size(2), kv.size(4), logits.data_ptr<float>());
    return logits;
  }

  StepF32Fn step_;
  ModelF32 model_;
  ScratchF32 scratch_;
  std::mutex busy_;
  std::vector<torch::Tensor> keep_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "Q4_1 weights x Q8_1 activations (llama.cpp's arithmetic) on x86 SIMD, and a fused decode step";
  module.def("set_prefetch", &set_prefetch, "how many tile-blocks ahead the product loops prefetch (0: none)",
             pybind11::arg("blocks"));
  module.def("prefetch", []() { return g_prefetch_blocks.load(); }, "the prefetch distance in tile-blocks");
  module.def("set_kv_prefetch", &set_kv_prefetch,
             "how many positions ahead the paged step's attention prefetches keys and values (0: none)",
             pybind11::arg("positions"));
  module.def("kv_prefetch", []() { return g_kv_prefetch.load(); }, "the key and value prefetch distance");
  module.def("set_streams", &set_streams, "how many weight streams a thread's product reads at this many rows",
             pybind11::arg("rows"), pybind11::arg("streams"), pybind11::arg("f32") = false);
  module.def("streams", &streams, "the weight streams a product reads at this many rows", pybind11::arg("rows"),
             pybind11::arg("f32") = false);
  module.def("stream_choices", &stream_choices, "the stream counts a product over this many rows can take",
             pybind11::arg("rows"), pybind11::arg("f32") = false);
  module.def("isas", &isas, "the instruction sets this CPU can run, fastest first");
  module.def("roof", &roof, "block sums a second on this thread at this instruction set: the tile loop's compute roof",
             pybind11::arg("isa"), pybind11::arg("seconds"));
  module.def("matmul", &matmul, "x (M, K) fp32 @ W.T for W (n, K) as Q4_1 tiles (solutions.q8_1.repack)",
             pybind11::arg("x"), pybind11::arg("tiles"), pybind11::arg("n"), pybind11::arg("isa"),
             pybind11::arg("residual"));
  module.def("matmul_f32", &matmul_f32, "x (M <= 8, K) fp32 @ W.T for an fp32 W (N, K), row- or column-major",
             pybind11::arg("x"), pybind11::arg("w"), pybind11::arg("isa"));
  module.def("quantize", &quantize, "x (M, K) fp32 as Q8_1: [q, d, s], or [q, lo, d, s] with the residual",
             pybind11::arg("x"), pybind11::arg("residual"), pybind11::arg("isa"));
  pybind11::class_<Decoder>(module, "Decoder")
      .def(pybind11::init<std::vector<int64_t>, double, bool, std::vector<torch::Tensor>, std::vector<torch::Tensor>,
                          torch::Tensor, torch::Tensor, torch::Tensor, const std::string&>())
      .def("step", &Decoder::step, "logits (vocab) after token, its K and V written at pos of kv",
           pybind11::arg("token"), pybind11::arg("kv"), pybind11::arg("pos"), pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("step_paged", &Decoder::step_paged,
           "logits (rows, vocab) after tokens (rows,), row r's K and V written at slot slots[r, lens[r]] of the pool",
           pybind11::arg("tokens"), pybind11::arg("pool"), pybind11::arg("slots"), pybind11::arg("lens"),
           pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("prefill_paged", &Decoder::prefill_paged,
           "logits (T or 1, vocab) after each of tokens (T,) of one sequence, written at slots table[start..]",
           pybind11::arg("tokens"), pybind11::arg("pool"), pybind11::arg("table"), pybind11::arg("start"),
           pybind11::arg("last_only"), pybind11::call_guard<pybind11::gil_scoped_release>());
  pybind11::class_<DecoderF32>(module, "DecoderF32")
      .def(pybind11::init<std::vector<int64_t>, double, std::vector<torch::Tensor>, std::vector<torch::Tensor>,
                          torch::Tensor, torch::Tensor, torch::Tensor, const std::string&>())
      .def("step", &DecoderF32::step, "logits (rows, vocab) after tokens (rows,), their K and V written at pos of kv",
           pybind11::arg("tokens"), pybind11::arg("kv"), pybind11::arg("pos"), pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("chunk", &DecoderF32::chunk, "logits (T, vocab) after each of T tokens of one sequence, written at pos.. of kv",
           pybind11::arg("tokens"), pybind11::arg("kv"), pybind11::arg("pos"), pybind11::call_guard<pybind11::gil_scoped_release>());
}
