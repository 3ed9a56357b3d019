// The loop of solutions/csrc/q4_1_q8_1.cpp, included once per instruction set inside a namespace that
// defines `dot` (32 unsigned codes x 32 signed bytes -> 8 int32 partial sums) under that set's target.
// Not a header to include anywhere else: it relies on the including file's Q8View, kBlock, kBlockBytes.

inline float hsum(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// One block (b) of weight row `wr` against M activation rows, added into acc[r] and mins[r]; R: with
// the residual pass (254 sum(c q) + sum(c lo), in units of d / 254).
template <int M, bool R>
inline void block(const uint8_t* wr, Q8View a, int64_t b, int64_t k, __m256* acc, float* mins) {
  const int64_t nb = k / kBlock;
  const uint8_t* blk = wr + b * kBlockBytes;
  const float dw = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk));
  const float mw = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(blk + 2));
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
  const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
                                         _mm256_set1_epi8(0x0F));  // weights 0..15 | 16..31
  for (int r = 0; r < M; ++r) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&a.q[r * k + b * kBlock]));
    __m256i sums = dot(codes, qa);
    if (R) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&a.lo[r * k + b * kBlock]));
      sums = _mm256_add_epi32(_mm256_sub_epi32(_mm256_slli_epi32(sums, 8), _mm256_slli_epi32(sums, 1)),
                              dot(codes, lo));  // 254 = 256 - 2
    }
    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.unit[r * nb + b]), _mm256_cvtepi32_ps(sums), acc[r]);
    mins[r] += mw * a.s[r * nb + b];
  }
}

// Output rows [n0, n1) of y (M, N). Each weight block is unpacked once for all M rows; even and odd
// blocks go to two accumulators, so the fused multiply-adds do not wait on one dependency chain.
template <int M, bool R>
void rows(const uint8_t* w, Q8View a, float* y, int64_t n0, int64_t n1, int64_t n, int64_t k) {
  const int64_t nb = k / kBlock;
  for (int64_t row = n0; row < n1; ++row) {
    const uint8_t* wr = w + row * nb * kBlockBytes;
    __m256 even[M], odd[M];
    float mins[M];
    for (int r = 0; r < M; ++r) even[r] = odd[r] = _mm256_setzero_ps(), mins[r] = 0.0f;
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      block<M, R>(wr, a, b, k, even, mins);
      block<M, R>(wr, a, b + 1, k, odd, mins);
    }
    if (b < nb) block<M, R>(wr, a, b, k, even, mins);
    for (int r = 0; r < M; ++r) y[r * n + row] = hsum(_mm256_add_ps(even[r], odd[r])) + mins[r];
  }
}
