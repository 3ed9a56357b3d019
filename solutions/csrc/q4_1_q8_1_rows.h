// The loop of solutions/csrc/q4_1_q8_1.cpp, included once per instruction set inside a namespace that
// defines `dot` (acc + 32 unsigned codes x 32 signed bytes, as 8 int32 partial sums) under that set's
// target. Not a header to include anywhere else: it relies on the including file's Q8View, kBlock,
// kBlockBytes. Activations come in the kernels' order (Q8View): each pair of blocks b, b + 1 as
// [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31], the order one 32-byte load of the two blocks' codes
// unpacks into (low nibbles, then high), and per block its scale and sum interleaved (u, s).

inline float hsum(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The integer sums of codes (lo, hi: the two nibble halves) against activation bytes at q (and the
// residual's at lo_q, R), in units of the block's `u`: 254 sum(c q) + sum(c lo) with the residual.
template <bool R>
inline __m256i sums(__m256i lo, __m256i hi, const int8_t* q, const int8_t* lo_q) {
  __m256i s = dot(dot(_mm256_setzero_si256(), lo, load32(q)), hi, load32(q + 32));
  if (R) {
    const __m256i r = dot(dot(_mm256_setzero_si256(), lo, load32(lo_q)), hi, load32(lo_q + 32));
    s = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(s, 8), _mm256_slli_epi32(s, 1)), r);  // 254 = 256 - 2
  }
  return s;
}

// Blocks b, b + 1 of weight row `wr` against M activation rows: lanes 0-3 of the sums are block b's,
// 4-7 block b + 1's. d, m of both convert in one instruction; (d u, m s) of both in one multiply.
template <int M, bool R>
inline void pair(const uint8_t* wr, Q8View a, int64_t b, int64_t k, __m256* acc, __m128* mins) {
  const uint8_t* b0 = wr + b * kBlockBytes;
  const uint8_t* b1 = b0 + kBlockBytes;
  const __m256i codes = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 4)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 4)));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(codes, mask), hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), mask);
  int32_t dm0, dm1;
  std::memcpy(&dm0, b0, 4);
  std::memcpy(&dm1, b1, 4);
  const __m128 dm = _mm_cvtph_ps(_mm_set_epi32(0, 0, dm1, dm0));  // d0 m0 d1 m1
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  for (int r = 0; r < M; ++r) {
    const int64_t at = r * k + b * kBlock;
    const __m256i s = sums<R>(lo, hi, a.q + at, R ? a.lo + at : nullptr);
    const __m128 scaled = _mm_mul_ps(dm, _mm_loadu_ps(a.us + 2 * (at / kBlock)));  // d0 u0, m0 s0, d1 u1, m1 s1
    const __m256 scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scaled), spread);
    acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(s), acc[r]);
    mins[r] = _mm_add_ps(mins[r], scaled);  // lanes 1 and 3 gather the m s terms
  }
}

// The last block of an odd count, alone: its activations are in plain order.
template <int M, bool R>
inline void single(const uint8_t* wr, Q8View a, int64_t b, int64_t k, __m256* acc, float* tail) {
  const uint8_t* blk = wr + b * kBlockBytes;
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
  const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
                                         _mm256_set1_epi8(0x0F));  // weights 0..15 | 16..31
  const float dw = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk));
  const float mw = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk + 2));
  for (int r = 0; r < M; ++r) {
    const int64_t i = r * k + b * kBlock;
    __m256i s = dot(_mm256_setzero_si256(), codes, load32(a.q + i));
    if (R)
      s = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(s, 8), _mm256_slli_epi32(s, 1)),
                           dot(_mm256_setzero_si256(), codes, load32(a.lo + i)));
    const float* us = a.us + 2 * (i / kBlock);
    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * us[0]), _mm256_cvtepi32_ps(s), acc[r]);
    tail[r] += mw * us[1];
  }
}

// Output rows [n0, n1) of y (M, N). Each weight block is unpacked once for all M rows; even and odd
// pairs go to two accumulators, so the fused multiply-adds do not wait on one dependency chain.
template <int M, bool R>
void rows(const uint8_t* w, Q8View a, float* y, int64_t n0, int64_t n1, int64_t n, int64_t k) {
  const int64_t nb = k / kBlock;
  for (int64_t row = n0; row < n1; ++row) {
    const uint8_t* wr = w + row * nb * kBlockBytes;
    __m256 even[M], odd[M];
    __m128 mins[M];
    float tail[M];
    for (int r = 0; r < M; ++r) even[r] = odd[r] = _mm256_setzero_ps(), mins[r] = _mm_setzero_ps(), tail[r] = 0.0f;
    int64_t b = 0;
    for (; b + 3 < nb; b += 4) {
      pair<M, R>(wr, a, b, k, even, mins);
      pair<M, R>(wr, a, b + 2, k, odd, mins);
    }
    if (b + 1 < nb) pair<M, R>(wr, a, b, k, even, mins), b += 2;
    if (b < nb) single<M, R>(wr, a, b, k, odd, tail);
    for (int r = 0; r < M; ++r) {
      const __m128 m = mins[r];
      const float ms = _mm_cvtss_f32(_mm_shuffle_ps(m, m, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(m, m, 3));
      y[r * n + row] = hsum(_mm256_add_ps(even[r], odd[r])) + ms + tail[r];
    }
  }
}
