// One decode step of a Llama model, 1 row or a batch, all in native code: included once per instruction set
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

// v (hd) rotated in place: v * cos + roll(v, hd / 2) * signed_sin, as model.apply_rope. The roll is two
// halves, not an index modulo hd: a division an element made RoPE 40% of this file's serial work.
inline void rope(float* v, const float* cos, const float* sin, int64_t hd, float* tmp) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) tmp[i] = v[i] * cos[i] + v[i + half] * sin[i];
  for (int64_t i = half; i < hd; ++i) tmp[i] = v[i] * cos[i] + v[i - half] * sin[i];
  std::memcpy(v, tmp, hd * sizeof(float));
}

// y (n) = Q8_1(x (k)) @ W.T: quantize into the scratch, then the product over threads.
inline void project(const Matrix& w, const float* x, float* y, bool residual, Q8Buf& q8) {
  quantize_rows(x, 1, w.k, residual, q8);
  product(w.tiles, acts(q8, w.k), 1, w.n, w.k, y, residual);
}

// The cache lines of one slot's keys or values (bytes from p), asked for before their use.
inline void prefetch_slot(const float* p, int64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (int64_t line = 0; line < bytes; line += 64)
    asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(at + line)));
}

// Every query head of one row (q: head h at q + h * hd, reading kv head h / group: key t at K + at(t) + (h /
// group) * head, its value at the same offset from V) over T positions, into o (head h at o + h * hd), with
// sc (n_heads x sc_stride) as scores: softmax(q_h K^T / sqrt(hd)) V for each head h. The heads take turns
// at each position (each head's sums in position order, as with one head alone), so a slot's keys (every
// kv head's, side by side) are read as one stretch of memory. A head at a time reads a strided third of
// each slot instead and waits on those loads: at 8 rows of 128 positions the step took 12-23% longer that
// way (docs/serving.md). With `ahead` > 0 it asks for the keys `ahead` positions before it reads them,
// then the values (the first ones while the last keys are read): prefetches move no result.
template <typename At>
inline void attend_row_at(const float* q, int64_t nh, int64_t group, const float* K, const float* V, int64_t head,
                          At at, int64_t T, int64_t hd, float* sc, int64_t sc_stride, float* o, int64_t ahead = 0) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t span = ((nh / group - 1) * head + hd) * 4;  // bytes of a slot's keys (every kv head's)
  float top[kMaxHeads], total[kMaxHeads];
  int64_t kv_at[kMaxHeads];  // head h's kv head, as an offset
  for (int64_t h = 0; h < nh; ++h) top[h] = -std::numeric_limits<float>::infinity(), kv_at[h] = h / group * head;
  for (int64_t t = 0; ahead && t < std::min(ahead, T); ++t) prefetch_slot(K + at(t), span);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t a = at(t);
    if (ahead) prefetch_slot(t + ahead < T ? K + at(t + ahead) : V + at((t + ahead - T) % T), span);
    for (int64_t h = 0; h < nh; ++h) {
      float& score = sc[h * sc_stride + t];
      score = dot_f32(q + h * hd, K + a + kv_at[h], hd) * scale;
      top[h] = std::max(top[h], score);
    }
  }
  for (int64_t h = 0; h < nh; ++h) total[h] = exp_sum(sc + h * sc_stride, T, top[h]);
  std::fill(o, o + nh * hd, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t a = at(t);
    if (ahead && t + ahead < T) prefetch_slot(V + at(t + ahead), span);
    for (int64_t h = 0; h < nh; ++h) axpy_f32(sc[h * sc_stride + t] / total[h], V + a + kv_at[h], o + h * hd, hd);
  }
}

// One query head qh (hd) over T keys and values stored one after another (T rows of hd): softmax(qh K^T /
// sqrt(hd)) V into o (hd), with sc (T) as scratch.
inline void attend_head(const float* qh, const float* K, const float* V, int64_t T, int64_t hd, float* sc, float* o) {
  attend_row_at(qh, 1, 1, K, V, 0, [hd](int64_t t) { return t * hd; }, T, hd, sc, T, o);
}

// Attention of each row's n_heads query heads (q: row r's at q + r * q_stride) over its positions
// 0..lens[r] of layer l, into out (rows, n_heads * hd); scores t_max floats for each head. Rows split over
// threads, a row's heads together (attend_row_at). A lone row leaves the other threads idle meanwhile and
// is still as fast as with its heads split over threads, which read strided memory (the same at 64-128
// positions, faster at 1,000).
inline void attend(const Model& m, const KvAt& kv, int64_t l, int64_t rows, const float* q, int64_t q_stride,
                   int64_t t_max, float* scores, float* out) {
  const int64_t hd = m.head_dim, nh = m.n_heads, group = m.n_heads / m.n_kv;
  const float* keys = kv.base + l * kv.layer;
  const int64_t stride = kv.slot, ahead = g_kv_prefetch.load(std::memory_order_relaxed);
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t* slots = kv.slots + r * kv.width;
      attend_row_at(q + r * q_stride, nh, group, keys, keys + kv.value, kv.head,
                    [slots, stride](int64_t t) { return slots[t] * stride; }, kv.lens[r] + 1, hd,
                    scores + r * nh * t_max, t_max, out + r * nh * hd, ahead);
    }
  });
}

// The same for rows of one sequence (kv.shared: a prefill chunk), which all read its keys and values:
// by torch's fused attention kernel, as solutions/system/kernels/attention_fast.py calls it (the query
// heads of a kv head folded into its rows, a bool "may attend" mask: row r sees positions 0..lens[r]),
// on the sequence's keys and values gathered through its slots. A loop per query head, as attend's,
// reads every key once a query: at a prefill's hundreds of rows, a few times slower than the kernel.
inline void attend_shared(const Model& m, const KvAt& kv, int64_t l, int64_t rows, const float* q,
                          int64_t q_stride, int64_t t_max, float* out) {
  const int64_t hd = m.head_dim, nkv = m.n_kv, group = m.n_heads / m.n_kv;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  float* keys = kv.base + l * kv.layer;
  const torch::Tensor slots =
      torch::from_blob(const_cast<int64_t*>(kv.slots), {t_max}, torch::TensorOptions().dtype(torch::kLong));
  const int64_t n_slots = slots.max().item<int64_t>() + 1;
  auto gathered = [&](float* at) {  // (1, n_kv, t_max, hd) from the slots' rows
    return torch::from_blob(at, {n_slots, nkv, hd}, {kv.slot, kv.head, 1}, f32)
        .index_select(0, slots)
        .permute({1, 0, 2})
        .unsqueeze(0);
  };
  const torch::Tensor k = gathered(keys), v = gathered(keys + kv.value);
  const torch::Tensor queries = torch::from_blob(const_cast<float*>(q), {rows, nkv, group, hd},
                                                 {q_stride, group * hd, hd, 1}, f32)
                                    .permute({1, 2, 0, 3})
                                    .reshape({1, nkv, group * rows, hd});  // (1, n_kv, group * rows, hd)
  const torch::Tensor lens =
      torch::from_blob(const_cast<int64_t*>(kv.lens), {rows}, torch::TensorOptions().dtype(torch::kLong));
  const torch::Tensor allowed =
      (torch::arange(t_max, torch::kLong).unsqueeze(0) <= lens.unsqueeze(1)).repeat({group, 1});  // (group * rows, t_max)
  const torch::Tensor y = at::scaled_dot_product_attention(queries, k, v, allowed);  // (1, n_kv, group * rows, hd)
  torch::from_blob(out, {rows, nkv, group, hd}, f32).copy_(y.view({nkv, group, rows, hd}).permute({2, 0, 1, 3}));
}

// y (rows, n) = Q8_1(x (rows, k)) @ W.T: quantize into the scratch, then the product over threads.
inline void project(const Matrix& w, const float* x, int64_t rows, float* y, bool residual, Q8Buf& q8) {
  quantize_rows(x, rows, w.k, residual, q8);
  product(w.tiles, acts(q8, w.k), rows, w.n, w.k, y, residual);
}

// Row `id` of the Q8_0 embedding (per 32-block: fp16 d, then 32 int8) as fp32 q * d, into out (d).
inline void embed_row(const Model& m, int64_t id, float* out) {
  const uint8_t* row = m.embed + id * (m.d / kBlock) * 34;
  for (int64_t b = 0; b < m.d / kBlock; ++b) {
    const float db = _cvtsh_ss(*reinterpret_cast<const uint16_t*>(row + b * 34));
    const int8_t* q = reinterpret_cast<const int8_t*>(row + b * 34 + 2);
    for (int j = 0; j < kBlock; ++j) out[b * kBlock + j] = static_cast<float>(q[j]) * db;
  }
}

// Row lg's top `rescore` logits (a min-heap of (logit, id) kept while scanning the ids in order: an id
// enters only above the heap's least), each recomputed exactly from the embedding's Q8_0 row against hr
// (solutions.weight_modes.RescoredHead). `first_above` skips the logits the heap would refuse, so the
// same ids enter as in a one-at-a-time scan. `top` and `row` (d floats) are the caller's scratch.
inline void rescore_row(const Model& m, float* lg, const float* hr, std::vector<std::pair<float, int64_t>>& top,
                        float* row) {
  const int64_t d = m.d;
  top.clear();
  if (m.rescore <= 0) return;
  int64_t v = 0;
  for (; v < m.vocab && static_cast<int64_t>(top.size()) < m.rescore; ++v) {
    top.emplace_back(lg[v], v);
    std::push_heap(top.begin(), top.end(), std::greater<>());
  }
  while ((v += first_above(lg + v, m.vocab - v, top.front().first)) < m.vocab) {
    std::pop_heap(top.begin(), top.end(), std::greater<>());
    top.back() = {lg[v], v};
    std::push_heap(top.begin(), top.end(), std::greater<>());
    ++v;
  }
  for (const auto& [value, id] : top) {
    embed_row(m, id, row);
    float exact = 0.0f;
    for (int64_t i = 0; i < d; ++i) exact += row[i] * hr[i];  // in order, one product a term
    lg[id] = exact;
  }
}

// Logits (head_rows, vocab) after tokens (rows,), for the last head_rows rows: row r's keys and values go
// to its position lens[r] (kv, a KvAt), and it attends to its positions 0..lens[r]. Every row writes
// before any attends, so rows of one sequence at consecutive positions (a prefill chunk: one table,
// width 0) see the rows before them. The weights are read once for all rows, and each row's sums are
// the same whichever rows share the step (the product's rows are independent), so a row's logits do not
// depend on its batch. The scratch holds `rows` rows.
void step(const Model& m, Scratch& s, const int64_t* tokens, int64_t rows, const KvAt& kv, int64_t head_rows,
          float* logits) {
  const int64_t d = m.d, hd = m.head_dim, nh = m.n_heads, nkv = m.n_kv, ff = m.d_ff;
  const int64_t qkv_dim = (nh + 2 * nkv) * hd;
  int64_t t_max = 0;
  for (int64_t r = 0; r < rows; ++r) t_max = std::max(t_max, kv.lens[r] + 1);
  float *x = s.x.data(), *h = s.h.data(), *qkv = s.qkv.data(), *out = s.out.data();
  for (int64_t r = 0; r < rows; ++r) embed_row(m, tokens[r], x + r * d);
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const LayerW& w = m.layers[l];
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, w.attn_norm, d, m.eps, h + r * d);
    project(w.wqkv, h, rows, qkv, m.residual, s.q8);
    float* keys = kv.base + l * kv.layer;
    for (int64_t r = 0; r < rows; ++r) {  // every row's keys and values written before any row attends
      float* q = qkv + r * qkv_dim;
      const int64_t pos = kv.lens[r], at = kv.slots[r * kv.width + pos] * kv.slot;
      for (int64_t head = 0; head < nh + nkv; ++head) rope(q + head * hd, m.cos + pos * hd, m.sin + pos * hd, hd, s.tmp.data());
      for (int64_t g = 0; g < nkv; ++g) {
        std::memcpy(keys + at + g * kv.head, q + (nh + g) * hd, hd * sizeof(float));
        std::memcpy(keys + kv.value + at + g * kv.head, q + (nh + nkv + g) * hd, hd * sizeof(float));
      }
    }
    if (kv.shared)
      attend_shared(m, kv, l, rows, qkv, qkv_dim, t_max, s.att.data());
    else
      attend(m, kv, l, rows, qkv, qkv_dim, t_max, s.scores.data(), s.att.data());
    project(w.wo, s.att.data(), rows, out, m.residual, s.q8);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += out[i];
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, w.ffn_norm, d, m.eps, h + r * d);
    project(w.gate_up, h, rows, s.gu.data(), m.residual, s.q8);
    for (int64_t r = 0; r < rows; ++r) {
      const float* gate = s.gu.data() + r * 2 * ff;
      silu_mul(gate, gate + ff, s.act.data() + r * ff, ff);
    }
    project(w.down, s.act.data(), rows, out, m.residual, s.q8);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += out[i];
  }
  const int64_t first = rows - head_rows;  // the rows whose logits are asked for
  for (int64_t r = 0; r < head_rows; ++r) rms_norm(x + (first + r) * d, m.norm, d, m.eps, h + r * d);
  project(m.head, h, head_rows, logits, m.residual, s.q8);
  at::parallel_for(0, head_rows, 1, [&](int64_t r0, int64_t r1) {  // rows split over threads
    std::vector<std::pair<float, int64_t>> top;
    std::vector<float> row(d);
    for (int64_t r = r0; r < r1; ++r) rescore_row(m, logits + r * m.vocab, h + r * d, top, row.data());
  });
}
