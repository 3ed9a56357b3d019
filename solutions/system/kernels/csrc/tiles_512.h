// The tile loop on 512-bit registers (AVX-512 VNNI): included once, inside the avx512vnni namespace of
// q4_1_q8_1.cpp, under that target. Not a header to include anywhere else: it relies on the including
// file's Acts, kBlock, kTileRows and kTileBlockBytes.
//
// A tile-block (solutions.q8_1.repack) is 16 weight rows' block b: their d and m (fp16), then 4 groups
// of 64 bytes, each 4 code bytes of every row. One register holds a group; the activation's matching 4
// bytes, broadcast to all 16 lanes, meet each row's 4 codes in one `vpdpbusd`, so lane i sums row i and
// no horizontal add is ever needed. Low nibbles are weights 4g..4g+3, high ones 16+4g..16+4g+3.

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The integer sums of one block for one activation row: codes lo[g] | hi[g] against bytes q, as int32
// per output row (in units of the block's `unit`: with the residual, 254 sum(c q) + sum(c lo)).
template <bool R>
inline __m512i block_sums(const __m512i* lo, const __m512i* hi, const int8_t* q, const int8_t* qlo) {
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();  // two chains, so dpbusd overlaps
  for (int g = 0; g < 4; ++g) {
    a = _mm512_dpbusd_epi32(a, lo[g], bcast4(q + 4 * g));
    b = _mm512_dpbusd_epi32(b, hi[g], bcast4(q + 16 + 4 * g));
  }
  __m512i s = _mm512_add_epi32(a, b);
  if (R) {
    __m512i c = _mm512_setzero_si512(), d = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      c = _mm512_dpbusd_epi32(c, lo[g], bcast4(qlo + 4 * g));
      d = _mm512_dpbusd_epi32(d, hi[g], bcast4(qlo + 16 + 4 * g));
    }
    s = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(s, 8), _mm512_slli_epi32(s, 1)),  // 254 = 256 - 2
                         _mm512_add_epi32(c, d));
  }
  return s;
}

// Tiles [t0, t1) of W against M activation rows: y[r * ldy + j] for output rows j of those tiles (a
// last tile past n is stored only up to n). Each tile-block is unpacked once for all M rows. The range
// is read as P runs side by side (tiles t, t + S, ... for S = a P-th of it), block by block: P streams
// of weights a thread can keep more of memory's requests in flight than one, or cost more than they
// give, by CPU and row count; which P each M takes is measured where the model loads (g_streams).
template <int M, bool R, int P>
void tiles(const uint8_t* w, Acts a, float* y, int64_t ldy, int64_t t0, int64_t t1, int64_t n) {
  const int64_t nb = a.k / kBlock, S = (t1 - t0) / P;
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const int64_t ahead = g_prefetch_blocks.load(std::memory_order_relaxed);
  for (int64_t t = t0; t < t0 + S; ++t) {
    __m512 acc[P][M];
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < M; ++r) acc[p][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4  // unrolled, as the rows below, so that every sum keeps a register
      for (int p = 0; p < P; ++p) {
        const uint8_t* blk = w + ((t + p * S) * nb + b) * kTileBlockBytes;
        prefetch(blk, ahead);
        const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
        const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
        __m512i lo[4], hi[4];
        for (int g = 0; g < 4; ++g) {
          const __m512i c = _mm512_loadu_si512(blk + 64 + 64 * g);
          lo[g] = _mm512_and_si512(c, mask);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(c, 4), mask);
        }
#pragma GCC unroll 8  // left to itself GCC kept 6-8 rows (or 2 streams) as a loop over sums on the stack
        for (int r = 0; r < M; ++r) {
          const int64_t at = r * a.k + b * kBlock;
          const __m512i s = block_sums<R>(lo, hi, a.q + at, R ? a.lo + at : nullptr);
          const int64_t i = r * nb + b;
          acc[p][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, _mm512_set1_ps(a.unit[i])), acc[p][r]);
          acc[p][r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(a.s[i]), acc[p][r]);
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      const int64_t j0 = (t + p * S) * kTileRows, keep = std::min<int64_t>(kTileRows, n - j0);
      const __mmask16 lanes = static_cast<__mmask16>((1u << keep) - 1);
      for (int r = 0; r < M; ++r) _mm512_mask_storeu_ps(y + r * ldy + j0, lanes, acc[p][r]);
    }
  }
  if (P > 1 && t0 + P * S < t1) tiles<M, R, 1>(w, a, y, ldy, t0 + P * S, t1, n);  // the tiles left over
}

// The tile loop's compute roof: n rounds of one tile-block's sums against 8 activation rows (one pass,
// `block_sums<false>`'s 8 vpdpbusd a row), each row's sums carried round to round as independent chains.
// Returns their lanes' total, so nothing is optimised away. Timed by q4_1_q8_1.cpp's `roof`.
inline int64_t roof_loop(int64_t n, const uint8_t* blk, const int8_t* q) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  __m512i lo[4], hi[4], acc[8];
  for (int g = 0; g < 4; ++g) {
    const __m512i c = _mm512_loadu_si512(blk + 64 + 64 * g);
    lo[g] = _mm512_and_si512(c, mask);
    hi[g] = _mm512_and_si512(_mm512_srli_epi16(c, 4), mask);
  }
  for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; ++i)
    for (int r = 0; r < 8; ++r)
      for (int g = 0; g < 4; ++g) {
        acc[r] = _mm512_dpbusd_epi32(acc[r], lo[g], bcast4(q + 32 * r + 4 * g));
        acc[r] = _mm512_dpbusd_epi32(acc[r], hi[g], bcast4(q + 32 * r + 16 + 4 * g));
      }
  __m512i all = acc[0];
  for (int r = 1; r < 8; ++r) all = _mm512_add_epi32(all, acc[r]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, all);
  int64_t total = 0;
  for (const int32_t v : lanes) total += v;
  return total;
}

// One 32-block of x as Q8_1 (see quantize_into in q4_1_q8_1.cpp, the readable form this must equal bit
// for bit): q, and with the residual lo; returns (d, sum q, sum lo) through the pointers.
inline void quantize_block(const float* x, bool residual, int8_t* q, int8_t* lo, float* d_out, int* sum_q,
                           int* sum_lo) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512 lim = _mm512_set1_ps(127.0f), neg = _mm512_set1_ps(-127.0f);
  auto steps = [&](__m512 v, float inv) {  // round-half-even(v * inv), clamped to -127..127
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(inv)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_min_ps(_mm512_max_ps(r, neg), lim);
  };
  const __m512 q0 = steps(x0, id), q1 = steps(x1, id);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q0)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q1)));
  *sum_q = static_cast<int>(_mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(q0), _mm512_cvtps_epi32(q1))));
  *d_out = d;
  *sum_lo = 0;
  if (residual) {
    const float d_lo = d / kLoSteps;
    const float id_lo = d_lo != 0.0f ? 1.0f / d_lo : 0.0f;
    const __m512 dv = _mm512_set1_ps(d);
    const __m512 l0 = steps(_mm512_sub_ps(x0, _mm512_mul_ps(dv, q0)), id_lo);  // the file is built without
    const __m512 l1 = steps(_mm512_sub_ps(x1, _mm512_mul_ps(dv, q1)), id_lo);  // contraction: no FMA here
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(l0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(l1)));
    *sum_lo = static_cast<int>(_mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(l0), _mm512_cvtps_epi32(l1))));
  }
}

// sum a[i] b[i] over n floats, and o[i] += p v[i]: the fp32 loops of the fused step (attention, norms).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(rest, a + i), _mm512_maskz_loadu_ps(rest, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

inline void axpy_f32(float p, const float* v, float* o, int64_t n) {
  const __m512 pv = _mm512_set1_ps(p);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + i), _mm512_loadu_ps(o + i)));
  for (; i < n; ++i) o[i] += p * v[i];
}

// exp(x) for 16 floats, to about 2 ulp (Cephes' expf: x = n ln2 + r, e^r by a degree-6 polynomial,
// then 2^n in the exponent bits); x clamped to where fp32 neither overflows nor loses all bits.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// The first i in [0, n) with p[i] > thr (an ordered compare: NaN is never above), or n: the LM head's
// rescoring skips 16 logits a compare while none would enter its heap.
inline int64_t first_above(const float* p, int64_t n, float thr) {
  const __m512 t = _mm512_set1_ps(thr);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    if (const __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + i), t, _CMP_GT_OQ)) return i + __builtin_ctz(k);
  for (; i < n; ++i)
    if (p[i] > thr) return i;
  return n;
}

// out[i] = exp(v[i] - top) over n floats; returns their sum (softmax's numerators and denominator).
inline float exp_sum(float* v, int64_t n, float top) {
  __m512 total = _mm512_setzero_ps();
  const __m512 t = _mm512_set1_ps(top);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(v + i), t));
    _mm512_storeu_ps(v + i, e);
    total = _mm512_add_ps(total, e);
  }
  if (i < n) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(rest, v + i), t));
    _mm512_mask_storeu_ps(v + i, rest, e);
    total = _mm512_add_ps(total, _mm512_maskz_mov_ps(rest, e));
  }
  return _mm512_reduce_add_ps(total);
}

// out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up, over n floats.
inline void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
