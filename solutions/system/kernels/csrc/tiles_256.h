// The tile loop on 256-bit registers, for CPUs without AVX-512: included once per instruction set
// (avxvnni, avx2) inside a namespace that defines `dot` (acc + 32 unsigned codes x 32 signed bytes,
// as 8 int32 sums of 4 products). Not a header to include anywhere else: it relies on the including
// file's Acts, kBlock, kTileRows and kTileBlockBytes. The layout is tiles_512.h's; a 64-byte group
// is two registers here, rows 0-7 and rows 8-15, each lane one row.

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// One half (8 rows) of a block's integer sums for one activation row: see tiles_512.h's block_sums.
template <bool R>
inline __m256i half_sums(const __m256i* lo, const __m256i* hi, const int8_t* q, const int8_t* qlo) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    a = dot(a, lo[g], bcast4(q + 4 * g));
    b = dot(b, hi[g], bcast4(q + 16 + 4 * g));
  }
  __m256i s = _mm256_add_epi32(a, b);
  if (R) {
    __m256i c = _mm256_setzero_si256(), d = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      c = dot(c, lo[g], bcast4(qlo + 4 * g));
      d = dot(d, hi[g], bcast4(qlo + 16 + 4 * g));
    }
    s = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(s, 8), _mm256_slli_epi32(s, 1)),  // 254 = 256 - 2
                         _mm256_add_epi32(c, d));
  }
  return s;
}

// Tiles [t0, t1) of W against M activation rows, as tiles_512.h's `tiles` (P runs read side by side).
template <int M, bool R, int P>
void tiles(const uint8_t* w, Acts a, float* y, int64_t ldy, int64_t t0, int64_t t1, int64_t n) {
  const int64_t nb = a.k / kBlock, S = (t1 - t0) / P;
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const int64_t ahead = g_prefetch_blocks.load(std::memory_order_relaxed);
  for (int64_t t = t0; t < t0 + S; ++t) {
    __m256 acc[P][M][2];
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < M; ++r) acc[p][r][0] = acc[p][r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      for (int p = 0; p < P; ++p) {
        const uint8_t* blk = w + ((t + p * S) * nb + b) * kTileBlockBytes;
        prefetch(blk, ahead);
        for (int h = 0; h < 2; ++h) {  // rows 0-7, then 8-15
          const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
          const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
          __m256i lo[4], hi[4];
          for (int g = 0; g < 4; ++g) {
            const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 64 * g + 32 * h));
            lo[g] = _mm256_and_si256(c, mask);
            hi[g] = _mm256_and_si256(_mm256_srli_epi16(c, 4), mask);
          }
          for (int r = 0; r < M; ++r) {
            const int64_t at = r * a.k + b * kBlock;
            const __m256i s = half_sums<R>(lo, hi, a.q + at, R ? a.lo + at : nullptr);
            const int64_t i = r * nb + b;
            acc[p][r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dv, _mm256_set1_ps(a.unit[i])),
                                           acc[p][r][h]);
            acc[p][r][h] = _mm256_fmadd_ps(mv, _mm256_set1_ps(a.s[i]), acc[p][r][h]);
          }
        }
      }
    }
    for (int p = 0; p < P; ++p) {
      const int64_t j0 = (t + p * S) * kTileRows, keep = std::min<int64_t>(kTileRows, n - j0);
      for (int r = 0; r < M; ++r) {
        if (keep == kTileRows) {
          _mm256_storeu_ps(y + r * ldy + j0, acc[p][r][0]);
          _mm256_storeu_ps(y + r * ldy + j0 + 8, acc[p][r][1]);
        } else {
          alignas(32) float out[kTileRows];
          _mm256_store_ps(out, acc[p][r][0]);
          _mm256_store_ps(out + 8, acc[p][r][1]);
          std::memcpy(y + r * ldy + j0, out, keep * sizeof(float));
        }
      }
    }
  }
  if (P > 1 && t0 + P * S < t1) tiles<M, R, 1>(w, a, y, ldy, t0 + P * S, t1, n);  // the tiles left over
}

// One 32-block of x as Q8_1: tiles_512.h's quantize_block on 256-bit registers.
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// 32 int32 (four registers, each in -127..127) as 32 int8 in order.
inline void store_bytes(const __m256i* v, int8_t* out) {
  const __m256i w01 = _mm256_packs_epi32(v[0], v[1]), w23 = _mm256_packs_epi32(v[2], v[3]);  // lane-interleaved
  const __m256i b = _mm256_packs_epi16(w01, w23);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

inline void quantize_block(const float* x, bool residual, int8_t* q, int8_t* lo, float* d_out, int* sum_q,
                           int* sum_lo) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 xs[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) xs[i] = _mm256_loadu_ps(x + 8 * i), amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, xs[i]));
  const float d = hmax(amax) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 lim = _mm256_set1_ps(127.0f), neg = _mm256_set1_ps(-127.0f);
  auto steps = [&](__m256 v, float inv) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(inv)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_min_ps(_mm256_max_ps(r, neg), lim);
  };
  __m256 qf[4];
  __m256i qi[4], total = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    qf[i] = steps(xs[i], id);
    qi[i] = _mm256_cvtps_epi32(qf[i]);
    total = _mm256_add_epi32(total, qi[i]);
  }
  store_bytes(qi, q);
  *sum_q = hsum_i32(total);
  *d_out = d;
  *sum_lo = 0;
  if (residual) {
    const float d_lo = d / kLoSteps;
    const float id_lo = d_lo != 0.0f ? 1.0f / d_lo : 0.0f;
    const __m256 dv = _mm256_set1_ps(d);
    __m256i li[4], lo_total = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      li[i] = _mm256_cvtps_epi32(steps(_mm256_sub_ps(xs[i], _mm256_mul_ps(dv, qf[i])), id_lo));  // no FMA: see 512
      lo_total = _mm256_add_epi32(lo_total, li[i]);
    }
    store_bytes(li, lo);
    *sum_lo = hsum_i32(lo_total);
  }
}

// The tile loop's compute roof, as tiles_512.h's roof_loop: n rounds of one tile-block's sums (both
// halves) against 8 activation rows, each row's sums carried round to round.
inline int64_t roof_loop(int64_t n, const uint8_t* blk, const int8_t* q) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256i lo[2][4], hi[2][4], acc[8][2];
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g) {
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 64 * g + 32 * h));
      lo[h][g] = _mm256_and_si256(c, mask);
      hi[h][g] = _mm256_and_si256(_mm256_srli_epi16(c, 4), mask);
    }
  for (int r = 0; r < 8; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; ++i)
    for (int r = 0; r < 8; ++r)
      for (int h = 0; h < 2; ++h)
        for (int g = 0; g < 4; ++g) {
          acc[r][h] = dot(acc[r][h], lo[h][g], bcast4(q + 32 * r + 4 * g));
          acc[r][h] = dot(acc[r][h], hi[h][g], bcast4(q + 32 * r + 16 + 4 * g));
        }
  int64_t total = 0;
  for (int r = 0; r < 8; ++r) total += hsum_i32(acc[r][0]) + hsum_i32(acc[r][1]);
  return total;
}

// sum a[i] b[i] over n floats, and o[i] += p v[i]: the fp32 loops of the fused step (attention, norms).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  float s = _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy_f32(float p, const float* v, float* o, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
  for (; i < n; ++i) o[i] += p * v[i];
}

// exp(x) for 8 floats: tiles_512.h's exp_ps on 256-bit registers.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// The first i in [0, n) with p[i] > thr (an ordered compare: NaN is never above), or n: the LM head's
// rescoring skips 8 logits a compare while none would enter its heap.
inline int64_t first_above(const float* p, int64_t n, float thr) {
  const __m256 t = _mm256_set1_ps(thr);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    if (const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), t, _CMP_GT_OQ))) return i + __builtin_ctz(k);
  for (; i < n; ++i)
    if (p[i] > thr) return i;
  return n;
}

// out[i] = exp(v[i] - top) over n floats; returns their sum.
inline float exp_sum(float* v, int64_t n, float top) {
  __m256 total = _mm256_setzero_ps();
  const __m256 t = _mm256_set1_ps(top);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(v + i), t));
    _mm256_storeu_ps(v + i, e);
    total = _mm256_add_ps(total, e);
  }
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  float sum = _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
  for (; i < n; ++i) sum += v[i] = std::exp(v[i] - top);
  return sum;
}

// out[i] = silu(gate[i]) * up[i], over n floats.
inline void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
