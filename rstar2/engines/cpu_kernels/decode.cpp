// The CPU decode step's fused kernels (rstar2.engines.cpu_kernels says why they exist).
//
//   attend(qkv, cos, sin, q_norm, k_norm, eps, cache_k, cache_v, layer, slot, write_pos,
//          block_k, block_v, row_block, heads, kv_heads, scale) -> [n, heads * head_dim]
//   rms_norm(x, weight, eps) -> x's shape and dtype
//   silu_mul(gate_up) -> [n, intermediate]
//   sample(logits, temperature, uniform) -> (ids [n] int64, logprobs [n] float32)
//
// Every kernel reads and writes the model's dtype (float32, bfloat16 or float16) and computes in
// float32, rounding to the dtype where transformers' modules hand a tensor on (a normalised row,
// a rotated query or key, an activation), so a step matches the model's own forward pass up to
// the order of float32 sums (and, in 16-bit dtypes, the rotary embedding's rounding once
// instead of per product).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
struct V {
  using R = __m512;
  static constexpr int W = 16;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R set1(float x) { return _mm512_set1_ps(x); }
  static inline R load(const float* p) { return _mm512_loadu_ps(p); }
  static inline R load(const at::BFloat16* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static inline R load(const at::Half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static inline void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static inline void store(at::BFloat16* p, R x) {  // round to nearest even, as c10 does
    __m512i b = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    b = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(b));
  }
  static inline void store(at::Half* p, R x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static inline R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static inline R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static inline R add(R a, R b) { return _mm512_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static inline R div(R a, R b) { return _mm512_div_ps(a, b); }
  static inline R max(R a, R b) { return _mm512_max_ps(a, b); }
  static inline float hsum(R x) { return _mm512_reduce_add_ps(x); }
  static inline float hmax(R x) { return _mm512_reduce_max_ps(x); }
  static inline R round(R x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static inline R pow2(R p, R n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
};
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
struct V {
  using R = __m256;
  static constexpr int W = 8;
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R set1(float x) { return _mm256_set1_ps(x); }
  static inline R load(const float* p) { return _mm256_loadu_ps(p); }
  static inline R load(const at::BFloat16* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static inline R load(const at::Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static inline void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static inline void store(at::BFloat16* p, R x) {
    __m256i b = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    b = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  static inline void store(at::Half* p, R x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static inline R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static inline R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static inline R add(R a, R b) { return _mm256_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static inline R div(R a, R b) { return _mm256_div_ps(a, b); }
  static inline R max(R a, R b) { return _mm256_max_ps(a, b); }
  static inline float hsum(R x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static inline float hmax(R x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  static inline R round(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline R pow2(R p, R n) {
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
};
#else
#error "rstar2's CPU decode kernels need AVX2 with FMA and F16C, or AVX-512"
#endif

// e^x for x in [-87, 88] (Cephes' expf polynomial, ~1 ulp); smaller x gives ~1e-38, not 0
inline V::R vexp(V::R x) {
  x = V::max(x, V::set1(-87.0f));
  V::R n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  V::R r = V::sub(x, V::mul(n, V::set1(0.693145751953125f)));
  r = V::sub(r, V::mul(n, V::set1(1.428606765330187045e-06f)));
  V::R p = V::set1(1.9875691500E-4f);
  p = V::fma(p, r, V::set1(1.3981999507E-3f));
  p = V::fma(p, r, V::set1(8.3334519073E-3f));
  p = V::fma(p, r, V::set1(4.1665795894E-2f));
  p = V::fma(p, r, V::set1(1.6666665459E-1f));
  p = V::fma(p, r, V::set1(5.0000001201E-1f));
  p = V::fma(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::pow2(p, n);
}

template <typename T>
inline T rounded(float x) { return static_cast<T>(x); }

// ------------------------------------------------------------------------ rms_norm, silu_mul

// transformers' RMSNorm: x * rsqrt(mean(x^2) + eps) in float32, rounded to the dtype, times the
// weight (rounded again)
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* out, int64_t rows, int64_t dim, float eps) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * dim;
      T* orow = out + r * dim;
      float ss = 0.f;
      int64_t d = 0;
      V::R acc = V::zero();
      for (; d + V::W <= dim; d += V::W) { V::R v = V::load(xr + d); acc = V::fma(v, v, acc); }
      ss = V::hsum(acc);
      for (; d < dim; ++d) ss += float(xr[d]) * float(xr[d]);
      const float inv = 1.f / std::sqrt(ss / dim + eps);
      for (d = 0; d < dim; ++d) orow[d] = rounded<T>(float(w[d]) * float(rounded<T>(float(xr[d]) * inv)));
    }
  });
}

// silu(gate) * up over [n, 2 * inter] rows (gate first), each product rounded as torch's two ops
template <typename T>
void silu_mul_rows(const T* gu, T* out, int64_t rows, int64_t inter) {
  at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
    alignas(64) float buf[V::W];
    for (int64_t r = begin; r < end; ++r) {
      const T* g = gu + r * 2 * inter;
      const T* u = g + inter;
      T* o = out + r * inter;
      int64_t d = 0;
      for (; d + V::W <= inter; d += V::W) {
        V::R gv = V::load(g + d);
        V::R s = V::div(gv, V::add(V::set1(1.f), vexp(V::sub(V::zero(), gv))));
        V::store(buf, s);
        for (int i = 0; i < V::W; ++i) o[d + i] = rounded<T>(float(rounded<T>(buf[i])) * float(u[d + i]));
      }
      for (; d < inter; ++d) {
        const float gv = float(g[d]);
        o[d] = rounded<T>(float(rounded<T>(gv / (1.f + std::exp(-gv)))) * float(u[d]));
      }
    }
  });
}

// ------------------------------------------------------------------------ attention

constexpr int CHUNK = 64;  // keys scored before their values are read
constexpr int MAX_DIM = 256;

struct Plan {  // one layer of one step
  int64_t heads, kv_heads, dim, cap, slots, layer;
  const int64_t* slot;  // each token's slot
  const int64_t* write_pos;
  const int64_t* row_block;  // null: no row reads a block
  const float* cos;  // [n, dim]
  const float* sin;
  float eps, scale;
};

// One head's vector from the fused projection: optional per-head RMSNorm (Qwen3), then the
// rotary embedding (transformers' rotate_half convention), in float32.
template <typename T>
inline void head_in(const T* src, const T* norm_w, const float* cos, const float* sin, float eps,
                    int64_t dim, bool rotate, float* dst) {
  float x[MAX_DIM];
  for (int64_t d = 0; d < dim; ++d) x[d] = float(src[d]);
  if (norm_w) {
    float ss = 0.f;
    for (int64_t d = 0; d < dim; ++d) ss += x[d] * x[d];
    const float inv = 1.f / std::sqrt(ss / dim + eps);
    for (int64_t d = 0; d < dim; ++d) x[d] = float(rounded<T>(float(norm_w[d]) * float(rounded<T>(x[d] * inv))));
  }
  if (!rotate) {
    std::memcpy(dst, x, dim * sizeof(float));
    return;
  }
  const int64_t half = dim / 2;
  for (int64_t d = 0; d < half; ++d) {
    dst[d] = x[d] * cos[d] - x[d + half] * sin[d];
    dst[d + half] = x[d + half] * cos[d + half] + x[d] * sin[d + half];
  }
}

// Rows ahead a software prefetch asks for: a decode step streams every cached key and value
// once, and the hardware prefetchers restart at each 4 KiB page of two interleaved streams.
constexpr int PREFETCH_ROWS = 8;

template <typename T, int D>
inline void prefetch_row(const T* row) {
  constexpr int LINES = (D * sizeof(T) + 63) / 64;
  for (int i = 0; i < LINES; ++i)
    _mm_prefetch(reinterpret_cast<const char*>(row) + 64 * i, _MM_HINT_T0);
}

template <typename T, int D, int G>
void attend_task(const float (&qf)[G][D], const T* const* seg_k, const T* const* seg_v,
                 const int64_t* seg_len, int nseg, T* out) {
  constexpr int NV = D / V::W;
  V::R qv[G][NV];
  for (int i = 0; i < G; ++i)
    for (int c = 0; c < NV; ++c) qv[i][c] = V::load(qf[i] + c * V::W);
  alignas(64) float acc[G][D];
  std::memset(acc, 0, sizeof(acc));
  float m[G], l[G];
  for (int i = 0; i < G; ++i) { m[i] = -std::numeric_limits<float>::infinity(); l[i] = 0.f; }
  alignas(64) float s[G][CHUNK];
  for (int sg = 0; sg < nseg; ++sg) {
    const T* K = seg_k[sg];
    const T* Vv = seg_v[sg];
    const int64_t len = seg_len[sg];
    for (int64_t c0 = 0; c0 < len; c0 += CHUNK) {
      const int cn = static_cast<int>(std::min<int64_t>(CHUNK, len - c0));
      for (int j = 0; j < cn; ++j) {
        const T* kr = K + (c0 + j) * D;
        // the values of this chunk and the keys further on are read next: ask for them now
        prefetch_row<T, D>(Vv + (c0 + j) * D);
        prefetch_row<T, D>(kr + PREFETCH_ROWS * D);
        V::R kv[NV];
        for (int c = 0; c < NV; ++c) kv[c] = V::load(kr + c * V::W);
        for (int i = 0; i < G; ++i) {
          V::R a = V::mul(qv[i][0], kv[0]);
          for (int c = 1; c < NV; ++c) a = V::fma(qv[i][c], kv[c], a);
          s[i][j] = V::hsum(a);
        }
      }
      const int padded = (cn + V::W - 1) / V::W * V::W;
      for (int i = 0; i < G; ++i) {
        for (int j = cn; j < padded; ++j) s[i][j] = -std::numeric_limits<float>::infinity();
        V::R mx = V::load(s[i]);
        for (int j = V::W; j < padded; j += V::W) mx = V::max(mx, V::load(s[i] + j));
        const float new_m = std::max(m[i], V::hmax(mx));
        const float alpha = std::exp(m[i] - new_m);
        m[i] = new_m;
        for (int j = 0; j < padded; j += V::W)
          V::store(s[i] + j, vexp(V::sub(V::load(s[i] + j), V::set1(new_m))));
        for (int j = cn; j < padded; ++j) s[i][j] = 0.f;  // padding weighs exactly nothing
        V::R sum = V::load(s[i]);
        for (int j = V::W; j < padded; j += V::W) sum = V::add(sum, V::load(s[i] + j));
        l[i] = l[i] * alpha + V::hsum(sum);
        if (alpha != 1.f)
          for (int c = 0; c < NV; ++c)
            V::store(acc[i] + c * V::W, V::mul(V::load(acc[i] + c * V::W), V::set1(alpha)));
      }
      V::R av[G][NV];
      for (int i = 0; i < G; ++i)
        for (int c = 0; c < NV; ++c) av[i][c] = V::load(acc[i] + c * V::W);
      for (int j = 0; j < cn; ++j) {
        const T* vr = Vv + (c0 + j) * D;
        prefetch_row<T, D>(vr + PREFETCH_ROWS * D);
        V::R vv[NV];
        for (int c = 0; c < NV; ++c) vv[c] = V::load(vr + c * V::W);
        for (int i = 0; i < G; ++i) {
          V::R p = V::set1(s[i][j]);
          for (int c = 0; c < NV; ++c) av[i][c] = V::fma(p, vv[c], av[i][c]);
        }
      }
      for (int i = 0; i < G; ++i)
        for (int c = 0; c < NV; ++c) V::store(acc[i] + c * V::W, av[i][c]);
    }
  }
  for (int i = 0; i < G; ++i) {
    V::R inv = V::set1(1.f / l[i]);
    for (int c = 0; c < NV; ++c) V::store(out + i * D + c * V::W, V::mul(V::load(acc[i] + c * V::W), inv));
  }
}

// Two passes over the step's tokens: every token's key and value go into its slot first, then
// every token attends. Tokens of one sequence may share a step (a prefill of its new tokens):
// each then reads the keys of those before it, which the first pass has written.
template <typename T, int D, int G>
void attend_layer(const Plan& p, const T* qkv, const T* q_norm, const T* k_norm, T* cache_k,
                  T* cache_v, const std::vector<at::Tensor>& block_k,
                  const std::vector<at::Tensor>& block_v, int64_t n, T* out) {
  const int64_t width = (p.heads + 2 * p.kv_heads) * D;
  const int64_t layer_size = p.slots * p.kv_heads * p.cap * D;
  T* lk = cache_k + p.layer * layer_size;
  T* lv = cache_v + p.layer * layer_size;
  auto slot_of = [&](int64_t b, int64_t h, T* base) {
    return base + (p.slot[b] * p.kv_heads + h) * p.cap * D;
  };
  at::parallel_for(0, n * p.kv_heads, 16, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / p.kv_heads, h = task % p.kv_heads;
      const T* row = qkv + b * width;
      const int64_t pos = p.write_pos[b];
      float kf[D];
      head_in(row + (p.heads + h) * D, k_norm, p.cos + b * D, p.sin + b * D, p.eps, D, true, kf);
      T* sk = slot_of(b, h, lk) + pos * D;
      for (int d = 0; d < D; ++d) sk[d] = rounded<T>(kf[d]);
      std::memcpy(slot_of(b, h, lv) + pos * D, row + (p.heads + p.kv_heads + h) * D, D * sizeof(T));
    }
  });
  at::parallel_for(0, n * p.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / p.kv_heads, h = task % p.kv_heads;
      const T* row = qkv + b * width;
      alignas(64) float qf[G][D];
      for (int i = 0; i < G; ++i) {
        float raw[D];
        head_in(row + (h * G + i) * D, q_norm, p.cos + b * D, p.sin + b * D, p.eps, D, true, raw);
        // transformers rounds the rotated query to the dtype before attention
        for (int d = 0; d < D; ++d) qf[i][d] = float(rounded<T>(raw[d])) * p.scale;
      }
      const T* seg_k[2];
      const T* seg_v[2];
      int64_t seg_len[2];
      int nseg = 0;
      if (p.row_block && p.row_block[b] >= 0) {
        const at::Tensor& bk = block_k[p.row_block[b]];
        const int64_t blen = bk.size(2);
        const int64_t off = (p.layer * p.kv_heads + h) * blen * D;
        seg_k[nseg] = bk.data_ptr<T>() + off;
        seg_v[nseg] = block_v[p.row_block[b]].data_ptr<T>() + off;
        seg_len[nseg++] = blen;
      }
      seg_k[nseg] = slot_of(b, h, lk);
      seg_v[nseg] = slot_of(b, h, lv);
      seg_len[nseg++] = p.write_pos[b] + 1;
      attend_task<T, D, G>(qf, seg_k, seg_v, seg_len, nseg, out + (b * p.heads + h * G) * D);
    }
  });
}

template <typename T, int D>
void attend_group(const Plan& p, int64_t g, const T* qkv, const T* qn, const T* kn, T* ck, T* cv,
                  const std::vector<at::Tensor>& bk, const std::vector<at::Tensor>& bv, int64_t n,
                  T* out) {
  switch (g) {
#define CASE(G_) case G_: return attend_layer<T, D, G_>(p, qkv, qn, kn, ck, cv, bk, bv, n, out);
    CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
  }
  TORCH_CHECK(false, "attend: ", g, " query heads per KV head (the kernel has 1 to 8)");
}

template <typename T>
void attend_typed(const Plan& p, const at::Tensor& qkv, const c10::optional<at::Tensor>& qn,
                  const c10::optional<at::Tensor>& kn, at::Tensor& ck, at::Tensor& cv,
                  const std::vector<at::Tensor>& bk, const std::vector<at::Tensor>& bv,
                  at::Tensor& out) {
  const T* qnp = qn ? qn->data_ptr<T>() : nullptr;
  const T* knp = kn ? kn->data_ptr<T>() : nullptr;
  const int64_t g = p.heads / p.kv_heads, n = qkv.size(0);
  if (p.dim == 64)
    return attend_group<T, 64>(p, g, qkv.data_ptr<T>(), qnp, knp, ck.data_ptr<T>(), cv.data_ptr<T>(), bk, bv, n, out.data_ptr<T>());
  if (p.dim == 128)
    return attend_group<T, 128>(p, g, qkv.data_ptr<T>(), qnp, knp, ck.data_ptr<T>(), cv.data_ptr<T>(), bk, bv, n, out.data_ptr<T>());
  TORCH_CHECK(false, "attend: head_dim ", p.dim, " (the kernel has 64 and 128)");
}

// ------------------------------------------------------------------------ sample

// Below e^-87 vexp stops at ~1.6e-38 instead of going to 0; subtracting this and keeping the
// positive part gives such weights (and a masked -inf logit's) exactly 0, and changes no other.
constexpr float BELOW_EXP_RANGE = 1.7e-38f;

inline V::R weight(V::R shifted) {
  return V::max(V::sub(vexp(shifted), V::set1(BELOW_EXP_RANGE)), V::zero());
}

// One row of rstar2.engines.sampling.sample_tokens without nucleus truncation, in three passes
// over the logits and no [n, vocab] temporaries: the largest logit, the softmax's normaliser of
// (x - max) / t, then the first token whose running weight passes u times the normaliser (the
// inverse-CDF draw); a greedy row (t = 0) takes the first largest logit, with its plain
// softmax log-prob.
template <typename T>
void sample_row(const T* x, int64_t vocab, float temperature, float u, int64_t* id, float* logprob) {
  V::R mv = V::set1(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + V::W <= vocab; i += V::W) mv = V::max(mv, V::load(x + i));
  float m = V::hmax(mv);
  for (; i < vocab; ++i) m = std::max(m, float(x[i]));
  const bool greedy = temperature == 0.f;
  const float t = greedy ? 1.f : temperature;
  const V::R scale = V::set1(t);
  const V::R mvec = V::set1(m);
  V::R zv = V::zero();
  for (i = 0; i + V::W <= vocab; i += V::W) zv = V::add(zv, weight(V::div(V::sub(V::load(x + i), mvec), scale)));
  float z = V::hsum(zv);
  auto scalar_weight = [&](int64_t k) {
    const float w = std::exp((float(x[k]) - m) / t);
    return w < BELOW_EXP_RANGE ? 0.f : w;
  };
  for (int64_t k = i; k < vocab; ++k) z += scalar_weight(k);
  int64_t pick = -1;
  if (greedy) {
    for (int64_t k = 0; k < vocab && pick < 0; ++k)
      if (float(x[k]) == m) pick = k;
  } else {
    const float threshold = u * z;
    float run = 0.f;
    int64_t last_positive = 0;
    alignas(64) float w[V::W];
    for (i = 0; i + V::W <= vocab && pick < 0; i += V::W) {
      V::store(w, weight(V::div(V::sub(V::load(x + i), mvec), scale)));
      float chunk = 0.f;
      for (int j = 0; j < V::W; ++j) chunk += w[j];
      if (run + chunk <= threshold) {
        run += chunk;
        for (int j = 0; j < V::W; ++j) if (w[j] > 0.f) last_positive = i + j;
        continue;
      }
      for (int j = 0; j < V::W && pick < 0; ++j) {
        run += w[j];
        if (w[j] > 0.f) last_positive = i + j;
        if (run > threshold) pick = i + j;
      }
    }
    for (int64_t k = i; k < vocab && pick < 0; ++k) {
      const float wk = scalar_weight(k);
      run += wk;
      if (wk > 0.f) last_positive = k;
      if (run > threshold) pick = k;
    }
    if (pick < 0) pick = last_positive;  // rounding left the sum short of the threshold
  }
  *id = pick;
  *logprob = (float(x[pick]) - m) / t - std::log(z);
}

template <typename F>
void by_dtype(at::ScalarType t, F&& f) {
  if (t == at::kFloat) return f(float{});
  if (t == at::kBFloat16) return f(at::BFloat16{});
  if (t == at::kHalf) return f(at::Half{});
  TORCH_CHECK(false, "rstar2 decode kernels: dtype ", t, " (float32, bfloat16, float16 only)");
}

}  // namespace

// qkv [n, (heads + 2 kv_heads) * head_dim], the fused projection (queries, keys, values) of n
// tokens; cos/sin [n, head_dim] float32; cache_k/v [layers, slots, kv_heads, length, head_dim];
// token b writes its key/value at write_pos[b] of slot slot[b] and attends to its block
// (block_k/v[row_block[b]], [layers, kv_heads, block_len, head_dim], when row_block[b] >= 0)
// and to its slot's positions 0..write_pos[b]. Tokens of one slot are its consecutive new
// tokens (a decode step has one per slot; a prefill, several), at distinct write positions.
at::Tensor attend(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                  const c10::optional<at::Tensor>& q_norm, const c10::optional<at::Tensor>& k_norm,
                  double eps, at::Tensor cache_k, at::Tensor cache_v, int64_t layer,
                  const at::Tensor& slot, const at::Tensor& write_pos,
                  const std::vector<at::Tensor>& block_k, const std::vector<at::Tensor>& block_v,
                  const at::Tensor& row_block, int64_t heads, int64_t kv_heads, double scale) {
  const int64_t n = qkv.size(0), dim = cache_k.size(4);
  TORCH_CHECK(qkv.dim() == 2 && qkv.is_contiguous() && qkv.size(1) == (heads + 2 * kv_heads) * dim,
              "attend: qkv must be a contiguous [n, (heads + 2 kv_heads) * head_dim]");
  TORCH_CHECK(cache_k.is_contiguous() && cache_v.is_contiguous() && cache_k.sizes() == cache_v.sizes(),
              "attend: the caches must be contiguous and alike");
  TORCH_CHECK(cache_k.scalar_type() == qkv.scalar_type(), "attend: cache and qkv dtypes differ");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
              cos.size(0) == n && cos.size(1) == dim, "attend: cos/sin must be float32 [n, head_dim]");
  TORCH_CHECK(write_pos.scalar_type() == at::kLong && write_pos.numel() == n, "attend: write_pos");
  TORCH_CHECK(heads % kv_heads == 0 && cache_k.size(2) == kv_heads, "attend: head counts");
  TORCH_CHECK(layer >= 0 && layer < cache_k.size(0), "attend: layer out of range");
  TORCH_CHECK(slot.scalar_type() == at::kLong && slot.numel() == n && slot.is_contiguous(), "attend: slot");
  TORCH_CHECK(write_pos.is_contiguous(), "attend: write_pos");
  const int64_t* wp = write_pos.data_ptr<int64_t>();
  const int64_t* sp = slot.data_ptr<int64_t>();
  for (int64_t b = 0; b < n; ++b) {
    TORCH_CHECK(wp[b] >= 0 && wp[b] < cache_k.size(3), "attend: write position beyond the slot");
    TORCH_CHECK(sp[b] >= 0 && sp[b] < cache_k.size(1), "attend: a token beyond the slots");
  }
  const bool blocks = row_block.numel() > 0;
  if (blocks) {
    TORCH_CHECK(row_block.scalar_type() == at::kLong && row_block.numel() == n, "attend: row_block");
    const int64_t* rb = row_block.data_ptr<int64_t>();
    for (int64_t b = 0; b < n; ++b) TORCH_CHECK(rb[b] < (int64_t)block_k.size(), "attend: no such block");
    for (size_t i = 0; i < block_k.size(); ++i)
      TORCH_CHECK(block_k[i].is_contiguous() && block_v[i].is_contiguous() &&
                  block_k[i].scalar_type() == qkv.scalar_type() && block_k[i].size(1) == kv_heads &&
                  block_k[i].size(3) == dim, "attend: blocks must be contiguous [layers, kv_heads, len, head_dim]");
  }
  Plan p{heads, kv_heads, dim, cache_k.size(3), cache_k.size(1), layer, sp, wp,
         blocks ? row_block.data_ptr<int64_t>() : nullptr, cos.data_ptr<float>(),
         sin.data_ptr<float>(), static_cast<float>(eps), static_cast<float>(scale)};
  auto out = at::empty({n, heads * dim}, qkv.options());
  by_dtype(qkv.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    attend_typed<T>(p, qkv, q_norm, k_norm, cache_k, cache_v, block_k, block_v, out);
  });
  return out;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && x.scalar_type() == weight.scalar_type(),
              "rms_norm: contiguous input and weight of one dtype");
  const int64_t dim = x.size(-1);
  TORCH_CHECK(weight.numel() == dim, "rms_norm: weight size");
  auto out = at::empty_like(x);
  by_dtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    rms_norm_rows<T>(x.data_ptr<T>(), weight.data_ptr<T>(), out.data_ptr<T>(), x.numel() / dim, dim,
                     static_cast<float>(eps));
  });
  return out;
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "silu_mul: a contiguous [n, 2 * intermediate]");
  const int64_t n = gate_up.size(0), inter = gate_up.size(1) / 2;
  auto out = at::empty({n, inter}, gate_up.options());
  by_dtype(gate_up.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    silu_mul_rows<T>(gate_up.data_ptr<T>(), out.data_ptr<T>(), n, inter);
  });
  return out;
}

// logits [n, vocab]; temperature [n] float32 (0: greedy); uniform [n] float32 in [0, 1), each
// sampled row's draw (ignored for greedy rows). Returns each row's token and its log-prob
// under softmax(logits / temperature) (plain softmax for greedy rows).
std::vector<at::Tensor> sample(const at::Tensor& logits, const at::Tensor& temperature,
                               const at::Tensor& uniform) {
  TORCH_CHECK(logits.dim() == 2 && logits.is_contiguous(), "sample: a contiguous [n, vocab]");
  const int64_t n = logits.size(0), vocab = logits.size(1);
  TORCH_CHECK(vocab > 0, "sample: an empty vocabulary");
  TORCH_CHECK(temperature.scalar_type() == at::kFloat && temperature.numel() == n &&
              uniform.scalar_type() == at::kFloat && uniform.numel() == n &&
              temperature.is_contiguous() && uniform.is_contiguous(),
              "sample: temperature and uniform must be float32 [n]");
  auto ids = at::empty({n}, logits.options().dtype(at::kLong));
  auto logprobs = at::empty({n}, logits.options().dtype(at::kFloat));
  const float* t = temperature.data_ptr<float>();
  const float* u = uniform.data_ptr<float>();
  int64_t* id = ids.data_ptr<int64_t>();
  float* lp = logprobs.data_ptr<float>();
  by_dtype(logits.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data_ptr<T>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) sample_row<T>(x + r * vocab, vocab, t[r], u[r], id + r, lp + r);
    });
  });
  return {ids, logprobs};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attend", &attend, "one step's attention of one layer, over slots and blocks");
  m.def("rms_norm", &rms_norm, "transformers' RMSNorm, fused");
  m.def("silu_mul", &silu_mul, "silu(gate) * up, fused");
  m.def("sample", &sample, "each row's next token and its log-prob, without nucleus truncation");
}
