// One decode step of a Llama model with fp32 weights, for 1..8 rows at once (greedy decode, the
// beams of a beam search, which share one position, or a few positions of one sequence): included
// once per instruction set inside that set's namespace of q4_1_q8_1.cpp, after decode_step.h (it
// uses rms_norm, rope, attend_head and silu_mul from there and from tiles_*.h). Not a header to
// include anywhere else.
//
// The same computation as solutions/model.py's `_run` for one token a row, in the same order, only
// fp32 summation order differing: each row's embedding, then per layer RMSNorm, the QKV product, RoPE
// on q and k, k and v written into the row's cache at `pos`, attention over positions 0..pos, the
// output product and residual add, RMSNorm, gate|up, SiLU(gate) * up, down and residual add; then the
// final norm and the tied LM head (the embedding). No quantization: every product is fp32.
//
// Products read each weight once for all rows. Row-major (N, K) is the fast form: one dot product per
// output row, rows split over threads (rows_f32). Column-major (K, N contiguous), the layout
// solutions.calibration may choose for torch's BLAS, is taken too, plainly: each input k scales a
// contiguous run of outputs, columns split over threads and kColumns at a time, so a run of every
// row's outputs sits in L1 while the weights stream past. 256-bit registers on every instruction
// set: the loops are memory-bound, and AVX2 + FMA is the floor this build runs on.

constexpr int64_t kColumns = 256;  // outputs a column-major pass keeps in L1: 8 rows x 1 KB

inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// s[r][b] = dot(w[r], x row b) for J weight rows and G rows of x (G, k), each weight row loaded once
// for all G: J * G independent sums (at most 16, what 16 registers hold), each summed in the same order
// whatever J and G are, so one output does not depend on which rows share the step.
template <int J, int G>
inline void dots(const float* const* w, const float* x, int64_t k, float (*s)[4]) {
  __m256 acc[J][G];
  for (int r = 0; r < J; ++r)
    for (int b = 0; b < G; ++b) acc[r][b] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    __m256 wv[J];
    for (int r = 0; r < J; ++r) wv[r] = _mm256_loadu_ps(w[r] + i);
    for (int b = 0; b < G; ++b) {
      const __m256 xv = _mm256_loadu_ps(x + b * k + i);
      for (int r = 0; r < J; ++r) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]);
    }
  }
  for (int r = 0; r < J; ++r)
    for (int b = 0; b < G; ++b) {
      float sum = hsum8(acc[r][b]);
      for (int64_t t = i; t < k; ++t) sum += w[r][t] * x[b * k + t];
      s[r][b] = sum;
    }
}

// y[b * n + j] = dot(w row j, x row b) for j in [j0, j1) and B rows of x (B, k), each weight row read
// from memory once for all B (rows of x four at a time while the weight rows sit in L1). The range is
// cut into J runs read side by side (rows j, j + S, j + 2S, ... for S = a J-th of the range): J streams
// of weights a thread can keep more of memory's requests in flight than one, and J sums hide the FMA's
// latency for one row; which J each B takes is measured where the model loads (g_streams_f32).
template <int B, int J>
void rows_f32(const MatF32& m, const float* x, float* y, int64_t j0, int64_t j1) {
  const int64_t k = m.k, n = m.n, S = (j1 - j0) / J;
  for (int64_t j = j0; j < j0 + S; ++j) {
    const float* w[J];
    for (int r = 0; r < J; ++r) w[r] = m.w + (j + r * S) * k;
    for (int b0 = 0; b0 < B; b0 += 4) {
      float s[J][4];
      switch (std::min(4, B - b0)) {
        case 1: dots<J, 1>(w, x + b0 * k, k, s); break;
        case 2: dots<J, 2>(w, x + b0 * k, k, s); break;
        case 3: dots<J, 3>(w, x + b0 * k, k, s); break;
        default: dots<J, 4>(w, x + b0 * k, k, s); break;
      }
      for (int r = 0; r < J; ++r)
        for (int b = 0; b < std::min(4, B - b0); ++b) y[(b0 + b) * n + j + r * S] = s[r][b];
    }
  }
  if (J > 1 && j0 + J * S < j1) rows_f32<B, 1>(m, x, y, j0 + J * S, j1);  // the rows left over, one stream
}

// The same for a column-major weight: outputs [j0, j1) in runs of kColumns, each run summing
// x[b][i] * w[i][run] over every input i.
template <int B>
void cols_f32(const MatF32& m, const float* x, float* y, int64_t j0, int64_t j1) {
  const int64_t k = m.k, n = m.n;
  alignas(64) float acc[B][kColumns];
  for (int64_t c0 = j0; c0 < j1; c0 += kColumns) {
    const int64_t width = std::min(kColumns, j1 - c0);
    for (int b = 0; b < B; ++b) std::fill(acc[b], acc[b] + width, 0.0f);
    for (int64_t i = 0; i < k; ++i) {
      const float* wi = m.w + i * n + c0;
      int64_t c = 0;
      for (; c + 8 <= width; c += 8) {
        const __m256 wv = _mm256_loadu_ps(wi + c);
        for (int b = 0; b < B; ++b)
          _mm256_store_ps(acc[b] + c, _mm256_fmadd_ps(_mm256_set1_ps(x[b * k + i]), wv, _mm256_load_ps(acc[b] + c)));
      }
      for (; c < width; ++c)
        for (int b = 0; b < B; ++b) acc[b][c] += x[b * k + i] * wi[c];
    }
    for (int b = 0; b < B; ++b) std::memcpy(y + b * n + c0, acc[b], width * sizeof(float));
  }
}

template <int B>
void gemv_rows(const MatF32& m, const float* x, float* y) {
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t chunk = (m.n + threads - 1) / threads;
  const int streams = g_streams_f32[B].load(std::memory_order_relaxed);
  at::parallel_for(0, m.n, chunk, [&](int64_t j0, int64_t j1) {
    if (m.col) return cols_f32<B>(m, x, y, j0, j1);
    if (streams == 4) return rows_f32<B, 4>(m, x, y, j0, j1);
    if (streams == 2) return rows_f32<B, 2>(m, x, y, j0, j1);
    rows_f32<B, 1>(m, x, y, j0, j1);
  });
}

// y (rows, n) = x (rows, k) @ W.T, 1 <= rows <= 8.
inline void gemv_f32(const MatF32& m, const float* x, int64_t rows, float* y) {
  switch (rows) {
    case 1: return gemv_rows<1>(m, x, y);
    case 2: return gemv_rows<2>(m, x, y);
    case 3: return gemv_rows<3>(m, x, y);
    case 4: return gemv_rows<4>(m, x, y);
    case 5: return gemv_rows<5>(m, x, y);
    case 6: return gemv_rows<6>(m, x, y);
    case 7: return gemv_rows<7>(m, x, y);
    default: return gemv_rows<8>(m, x, y);
  }
}

// Attention of every row's n_heads query heads over its own sequence's keys and values 0..pos (its
// position; a row sees the rows before it in the same sequence, written first); rows x heads split
// over threads. q: row r's heads at q + r * q_stride (n_heads * hd); kv_seq(seq, 0 | 1) a sequence's
// keys | values (n_kv, max_len, hd) of this layer; scores: t_max floats per row and head; out (rows,
// n_heads * hd).
template <typename KV>
void attend_rows(const ModelF32& m, const RowF32* rs, int64_t rows, const float* q, int64_t q_stride, KV kv_seq,
                 int64_t max_len, int64_t t_max, float* scores, float* out) {
  const int64_t hd = m.head_dim, nh = m.n_heads, group = m.n_heads / m.n_kv, qd = nh * hd;
  at::parallel_for(0, rows * nh, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t r = u / nh, h = u % nh, kv_at = (h / group) * max_len * hd;
      attend_head(q + r * q_stride + h * hd, kv_seq(rs[r].seq, 0) + kv_at, kv_seq(rs[r].seq, 1) + kv_at,
                  rs[r].pos + 1, hd, scores + u * t_max, out + r * qd + h * hd);
    }
  });
}

// Logits (rows, vocab) for `rows` tokens, each of a sequence (a row of kv (2, n_layers, n_seq, n_kv,
// max_len, hd)) at a position: its keys and values go there, and it attends to its sequence's
// positions 0..its own. The beams of a beam search are rows of different sequences at one position;
// a chunk of one sequence (speculative decoding's verification) is rows at consecutive positions.
// Every row's sums are the same whichever rows share the step: one token's logits do not depend on it.
void step_f32(const ModelF32& m, ScratchF32& s, const RowF32* rs, int64_t rows, float* kv, int64_t n_seq,
              int64_t max_len, float* logits) {
  const int64_t d = m.d, hd = m.head_dim, nh = m.n_heads, nkv = m.n_kv;
  const int64_t qkv_dim = (nh + 2 * nkv) * hd, ff = m.d_ff;
  const int64_t seq_kv = nkv * max_len * hd;  // floats of one sequence's keys (or values) in one layer
  int64_t t_max = 0;
  for (int64_t r = 0; r < rows; ++r) t_max = std::max(t_max, rs[r].pos + 1);
  float *x = s.x.data(), *h = s.h.data(), *qkv = s.qkv.data(), *att = s.att.data(), *out = s.out.data();
  for (int64_t r = 0; r < rows; ++r)  // the embedding's row for each token
    for (int64_t i = 0; i < d; ++i)
      x[r * d + i] = m.embed.col ? m.embed.w[i * m.vocab + rs[r].token] : m.embed.w[rs[r].token * d + i];
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const LayerF32& w = m.layers[l];
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, w.attn_norm, d, m.eps, h + r * d);
    gemv_f32(w.wqkv, h, rows, qkv);
    const auto kv_seq = [&](int64_t seq, int which) { return kv + ((which * m.n_layers + l) * n_seq + seq) * seq_kv; };
    for (int64_t r = 0; r < rows; ++r) {  // every row's keys and values written before any row attends
      float* q = qkv + r * qkv_dim;
      const int64_t pos = rs[r].pos;
      for (int64_t head = 0; head < nh + nkv; ++head) rope(q + head * hd, m.cos + pos * hd, m.sin + pos * hd, hd, s.tmp.data());
      for (int64_t g = 0; g < nkv; ++g) {
        std::memcpy(kv_seq(rs[r].seq, 0) + (g * max_len + pos) * hd, q + (nh + g) * hd, hd * sizeof(float));
        std::memcpy(kv_seq(rs[r].seq, 1) + (g * max_len + pos) * hd, q + (nh + nkv + g) * hd, hd * sizeof(float));
      }
    }
    attend_rows(m, rs, rows, qkv, qkv_dim, kv_seq, max_len, t_max, s.scores.data(), att);
    gemv_f32(w.wo, att, rows, out);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += out[i];
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, w.ffn_norm, d, m.eps, h + r * d);
    gemv_f32(w.gate_up, h, rows, s.gu.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float* gate = s.gu.data() + r * 2 * ff;
      silu_mul(gate, gate + ff, s.act.data() + r * ff, ff);
    }
    gemv_f32(w.down, s.act.data(), rows, out);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += out[i];
  }
  for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, m.norm, d, m.eps, h + r * d);
  gemv_f32(m.embed, h, rows, logits);
}
