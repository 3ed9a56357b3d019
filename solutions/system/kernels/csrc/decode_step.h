// One decode step of a Llama model at batch 1, all in native code: included once per instruction set
// inside that set's namespace of q4_1_q8_1.cpp (after its `tiles` and `product`), so the loops here are
// vectorized for the same target. Not a header to include anywhere else: it relies on the including
// file's Model, Scratch, Q8Buf and acts, and its namespace's quantize_rows, product and fp32 helpers.
//
// The same computation as solutions/model.py's `_run` for one token, in the same order: embedding row
// (Q8_0, q * d in fp32), then per layer RMSNorm, the fused QKV product, RoPE on q and k, k and v
// written into the cache at `pos`, attention over positions 0..pos (query head h reads kv head
// h / group), the output product and residual add, RMSNorm, gate|up product, SiLU(gate) * up, the down
// product and residual add; then the final RMSNorm and the LM head, whose top `rescore` logits are
// recomputed exactly from the embedding's Q8_0 rows (solutions.weight_modes.RescoredHead). Every product
// quantizes its activations to Q8_1 (with the residual pass where the model has it) exactly as
// solutions.q8_1 does. What differs from model.py is only fp32 summation order.

inline void rms_norm(const float* x, const float* w, int64_t d, float eps, float* out) {
  const float ss = dot_f32(x, x, d);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * r * w[i];
}

// v (hd) rotated in place: v * cos + roll(v, hd / 2) * signed_sin, as model.apply_rope.
inline void rope(float* v, const float* cos, const float* sin, int64_t hd, float* tmp) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < hd; ++i) tmp[i] = v[i] * cos[i] + v[(i + half) % hd] * sin[i];
  std::memcpy(v, tmp, hd * sizeof(float));
}

// y (n) = Q8_1(x (k)) @ W.T: quantize into the scratch, then the product over threads.
inline void project(const Matrix& w, const float* x, float* y, bool residual, Q8Buf& q8) {
  quantize_rows(x, 1, w.k, residual, q8);
  product(w.tiles, acts(q8, w.k), 1, w.n, w.k, y, residual);
}

// One query head qh (hd) over keys K and values V (T rows of hd each): softmax(qh K^T / sqrt(hd)) V into
// o (hd), with sc (T) as scratch.
inline void attend_head(const float* qh, const float* K, const float* V, int64_t T, int64_t hd, float* sc, float* o) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < T; ++t) {
    sc[t] = dot_f32(qh, K + t * hd, hd) * scale;
    top = std::max(top, sc[t]);
  }
  const float total = exp_sum(sc, T, top);
  std::fill(o, o + hd, 0.0f);
  for (int64_t t = 0; t < T; ++t) axpy_f32(sc[t] / total, V + t * hd, o, hd);
}

// Attention of the n_heads query heads in q (n_heads * hd) over keys and values 0..T-1 of one layer's
// cache (each (n_kv, max_len, hd)), into out (n_heads * hd); heads split over threads.
inline void attend(const Model& m, const float* q, const float* keys, const float* values, int64_t max_len,
                   int64_t T, float* scores, float* out) {
  const int64_t hd = m.head_dim, group = m.n_heads / m.n_kv;
  at::parallel_for(0, m.n_heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kv_at = (h / group) * max_len * hd;
      attend_head(q + h * hd, keys + kv_at, values + kv_at, T, hd, scores + h * T, out + h * hd);
    }
  });
}

// Logits (vocab) for the token after `token`, whose keys and values go to position `pos` of kv
// (2, n_layers, 1, n_kv, max_len, hd), which already holds positions 0..pos-1.
void step(const Model& m, Scratch& s, int64_t token, float* kv, int64_t max_len, int64_t pos, float* logits) {
  const int64_t d = m.d, hd = m.head_dim, nh = m.n_heads, nkv = m.n_kv, T = pos + 1;
  const int64_t layer_kv = nkv * max_len * hd;  // floats of one layer's keys (or values)
  float* x = s.x.data();
  {  // the Q8_0 embedding row: per 32-block, fp16 d then 32 int8
    const uint8_t* row = m.embed + token * (d / kBlock) * 34;
    for (int64_t b = 0; b < d / kBlock; ++b) {
      const float db = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(row + b * 34));
      const int8_t* q = reinterpret_cast<const int8_t*>(row + b * 34 + 2);
      for (int j = 0; j < kBlock; ++j) x[b * kBlock + j] = static_cast<float>(q[j]) * db;
    }
  }
  const float* cos = m.cos + pos * hd;
  const float* sin = m.sin + pos * hd;
  float* h = s.h.data();
  float* qkv = s.qkv.data();
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const LayerW& w = m.layers[l];
    rms_norm(x, w.attn_norm, d, m.eps, h);
    project(w.wqkv, h, qkv, m.residual, s.q8);
    for (int64_t head = 0; head < nh + nkv; ++head) rope(qkv + head * hd, cos, sin, hd, s.tmp.data());
    float* keys = kv + l * layer_kv;
    float* values = kv + (m.n_layers + l) * layer_kv;
    for (int64_t g = 0; g < nkv; ++g) {
      std::memcpy(keys + g * max_len * hd + pos * hd, qkv + (nh + g) * hd, hd * sizeof(float));
      std::memcpy(values + g * max_len * hd + pos * hd, qkv + (nh + nkv + g) * hd, hd * sizeof(float));
    }
    attend(m, qkv, keys, values, max_len, T, s.scores.data(), s.att.data());
    project(w.wo, s.att.data(), s.out.data(), m.residual, s.q8);
    for (int64_t i = 0; i < d; ++i) x[i] += s.out[i];
    rms_norm(x, w.ffn_norm, d, m.eps, h);
    project(w.gate_up, h, s.gu.data(), m.residual, s.q8);
    const float* gate = s.gu.data();
    const float* up = gate + m.d_ff;
    silu_mul(gate, up, s.act.data(), m.d_ff);
    project(w.down, s.act.data(), s.out.data(), m.residual, s.q8);
    for (int64_t i = 0; i < d; ++i) x[i] += s.out[i];
  }
  rms_norm(x, m.norm, d, m.eps, h);
  project(m.head, h, logits, m.residual, s.q8);
  // the top `rescore` logits, recomputed exactly from the embedding's Q8_0 rows
  std::vector<std::pair<float, int64_t>>& top = s.top;
  top.clear();
  for (int64_t v = 0; v < m.vocab; ++v) {
    if (static_cast<int64_t>(top.size()) < m.rescore) {
      top.emplace_back(logits[v], v);
      std::push_heap(top.begin(), top.end(), std::greater<>());
    } else if (logits[v] > top.front().first) {
      std::pop_heap(top.begin(), top.end(), std::greater<>());
      top.back() = {logits[v], v};
      std::push_heap(top.begin(), top.end(), std::greater<>());
    }
  }
  for (const auto& [value, v] : top) {
    const uint8_t* row = m.embed + v * (d / kBlock) * 34;
    float exact = 0.0f;
    for (int64_t b = 0; b < d / kBlock; ++b) {
      const float db = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(row + b * 34));
      const int8_t* q = reinterpret_cast<const int8_t*>(row + b * 34 + 2);
      for (int j = 0; j < kBlock; ++j) exact += static_cast<float>(q[j]) * db * h[b * kBlock + j];
    }
    logits[v] = exact;
  }
}
