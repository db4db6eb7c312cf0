// The building blocks of the CPU attention kernels (cache_attention.cc: attention against a KV
// cache; causal_attention.cc: the training attention of full sequences, forward and backward):
// register-tiled products of a few query rows with a block of keys (Scores) or of weight rows with
// a block of value rows (Mix), the vectorised exponential, and the work sharing over XLA's intra-op
// thread pool (ForEachUnit). Float32, row-major; AVX-512 or AVX2 + FMA tiles where the compiler
// targets them (one source, the vector width from Vec), portable loops otherwise.
#ifndef ARENARL_ATTENTION_TILES_H_
#define ARENARL_ATTENTION_TILES_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace arenarl {
namespace {  // each kernel's translation unit gets its own copy

namespace ffi = xla::ffi;

// Key blocks of the products: each block's keys and values (16 KB each at F = 64) are read from
// memory once for all the query rows of a pass and then served from L1 to the register tiles.
constexpr int64_t kBlock = 64;


// The weight of row r for value row j: w[r * w_stride + j], or with kByColumn (weights given
// transposed, [len, rows]) w[j * w_stride + r].
template <bool kByColumn>
inline const float* Weight(const float* w, int64_t w_stride, int64_t r, int64_t j) {
  return kByColumn ? w + j * w_stride + r : w + r * w_stride + j;
}

// out[r][:] += sum_j weight(r, j) * values[j, :] for R rows of weights, j < len; values is
// [len, F]. The plain loop: the portable build, and feature sizes the tiles do not fit.
template <bool kByColumn>
void MixPlain(const float* w, int64_t w_stride, int64_t r_dim, const float* values,
              int64_t f_dim, int64_t len, float* out) {
  for (int64_t r = 0; r < r_dim; ++r)
    for (int64_t j = 0; j < len; ++j) {
      const float wj = *Weight<kByColumn>(w, w_stride, r, j);
      for (int64_t f = 0; f < f_dim; ++f) out[r * f_dim + f] += wj * values[j * f_dim + f];
    }
}

#if defined(__AVX2__) && defined(__FMA__)

// One vector of float lanes and the handful of operations the tiles use: 16 lanes on AVX-512
// (32 registers), 8 on AVX2 + FMA (16 registers). The tiles below are written once against it;
// each output element is accumulated in the same order at either width, so the products agree
// bit for bit across the two builds and only the lane sums of ExpSum differ in rounding.
#if defined(__AVX512F__)
struct Vec {
  using T = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kRegisters = 32;
  static constexpr const char* kIsa = "avx512";
  static T Zero() { return _mm512_setzero_ps(); }
  static T Set(float x) { return _mm512_set1_ps(x); }
  static T Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, T v) { _mm512_storeu_ps(p, v); }
  // Lanes [0, n) (n < kLanes) with the rest zero, without reading past them.
  static T LoadHead(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T Fnma(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T MaxOf(T a, T b) { return _mm512_max_ps(a, b); }
  static T Round(T x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127], by building the float's exponent bits.
  static T Pow2(T n) {
    const __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(e);
  }
};
#else
struct Vec {
  using T = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kRegisters = 16;
  static constexpr const char* kIsa = "avx2";
  static T Zero() { return _mm256_setzero_ps(); }
  static T Set(float x) { return _mm256_set1_ps(x); }
  static T Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T LoadHead(const float* p, int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane));
  }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T Fnma(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T Mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T MaxOf(T a, T b) { return _mm256_max_ps(a, b); }
  static T Round(T x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T Pow2(T n) {
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(e);
  }
};
#endif

constexpr int64_t kLanes = Vec::kLanes;
constexpr const char* kIsa = Vec::kIsa;
constexpr int64_t kAhead = 2;
// Query rows per Scores tile: 2 x rows accumulators + 2 keys + 1 broadcast fit the registers.
constexpr int kScoreRows = (Vec::kRegisters - 3) / 2 > 12 ? 12 : (Vec::kRegisters - 3) / 2;

// The horizontal sum and maximum of a vector's lanes (in lane order, through memory).
inline float LaneSum(Vec::T v) {
  alignas(64) float lanes[kLanes];
  Vec::Store(lanes, v);
  float sum = 0.0f;
  for (const float x : lanes) sum += x;
  return sum;
}

inline float LaneMax(Vec::T v) {
  alignas(64) float lanes[kLanes];
  Vec::Store(lanes, v);
  float m = -INFINITY;
  for (const float x : lanes) m = std::max(m, x);
  return m;
}

// scores[r][j] = q[r] . keys[:, j] for RG queries (rows of q, F apart) and j < len; keys is
// [F, stride]. Register tile: RG queries x 2 vectors of slots, so each key is loaded once for
// all queries.
template <int RG>
void ScoresTile(const float* q, const float* keys, int64_t f_dim, int64_t stride, int64_t len,
                float* scores, int64_t scores_stride) {
  constexpr int64_t kTile = 2 * kLanes;
  int64_t j = 0;
  for (; j + kTile <= len; j += kTile) {
    Vec::T acc[RG][2];
    for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = Vec::Zero();
    for (int64_t f = 0; f < f_dim; ++f) {
      const float* row = keys + f * stride + j;
      // A tile reads from each of F rows: too many streams for the hardware prefetcher, so
      // fetch the same rows kAhead tiles ahead by hand.
      _mm_prefetch(reinterpret_cast<const char*>(row + kTile * kAhead), _MM_HINT_T0);
      const Vec::T k0 = Vec::Load(row), k1 = Vec::Load(row + kLanes);
      for (int r = 0; r < RG; ++r) {
        const Vec::T qr = Vec::Set(q[r * f_dim + f]);
        acc[r][0] = Vec::Fma(qr, k0, acc[r][0]);
        acc[r][1] = Vec::Fma(qr, k1, acc[r][1]);
      }
    }
    for (int r = 0; r < RG; ++r) {
      Vec::Store(scores + r * scores_stride + j, acc[r][0]);
      Vec::Store(scores + r * scores_stride + j + kLanes, acc[r][1]);
    }
  }
  for (; j < len; j += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, len - j);
    Vec::T acc[RG];
    for (int r = 0; r < RG; ++r) acc[r] = Vec::Zero();
    for (int64_t f = 0; f < f_dim; ++f) {
      const Vec::T k0 = Vec::LoadHead(keys + f * stride + j, n);
      for (int r = 0; r < RG; ++r) acc[r] = Vec::Fma(Vec::Set(q[r * f_dim + f]), k0, acc[r]);
    }
    alignas(64) float tmp[kLanes];
    for (int r = 0; r < RG; ++r) {
      Vec::Store(tmp, acc[r]);
      std::copy(tmp, tmp + n, scores + r * scores_stride + j);
    }
  }
}

// out[r][:] += sum_j weight(r, j) * values[j, :] for RG rows of weights, j < len; values is
// [len, F] with F a multiple of NV vectors. Register tile: RG rows x NV vectors of features
// (fixed sizes, so the compiler keeps the accumulators in registers).
template <int RG, int NV, bool kByColumn>
void MixTile(const float* w, int64_t w_stride, const float* values, int64_t f_dim, int64_t len,
             float* out) {
  for (int64_t f0 = 0; f0 < f_dim; f0 += NV * kLanes) {
    Vec::T acc[RG][NV];
    for (int r = 0; r < RG; ++r)
      for (int i = 0; i < NV; ++i) acc[r][i] = Vec::Load(out + r * f_dim + f0 + kLanes * i);
    for (int64_t j = 0; j < len; ++j) {
      const float* row = values + j * f_dim + f0;
      Vec::T v[NV];
      for (int i = 0; i < NV; ++i) v[i] = Vec::Load(row + kLanes * i);
      for (int r = 0; r < RG; ++r) {
        const Vec::T wr = Vec::Set(*Weight<kByColumn>(w, w_stride, r, j));
        for (int i = 0; i < NV; ++i) acc[r][i] = Vec::Fma(wr, v[i], acc[r][i]);
      }
    }
    for (int r = 0; r < RG; ++r)
      for (int i = 0; i < NV; ++i) Vec::Store(out + r * f_dim + f0 + kLanes * i, acc[r][i]);
  }
}

// Calls fn.template operator()<K>() for the K in [1, kMax] equal to k (k clamped to kMax): the
// tiles' row counts are template arguments, so each count is its own fully unrolled tile.
template <int K, int kMax, typename Fn>
inline void WithRows(int64_t k, Fn&& fn) {
  if constexpr (K >= kMax) {
    fn.template operator()<kMax>();
  } else {
    if (k <= K) return fn.template operator()<K>();
    WithRows<K + 1, kMax>(k, fn);
  }
}

// The scores of r_dim queries, kScoreRows at a time (6 on AVX2, 12 on AVX-512).
void Scores(const float* q, int64_t r_dim, const float* keys, int64_t f_dim, int64_t stride,
            int64_t len, float* scores, int64_t scores_stride) {
  for (int64_t r = 0; r < r_dim; r += kScoreRows) {
    const float* qr = q + r * f_dim;
    float* sr = scores + r * scores_stride;
    WithRows<1, kScoreRows>(r_dim - r, [&]<int RG>() {
      ScoresTile<RG>(qr, keys, f_dim, stride, len, sr, scores_stride);
    });
  }
}

// exp(x) for x <= 0 (softmax inputs after subtracting the maximum): 2^n * p(x - n ln 2) with a
// degree-6 Taylor polynomial on |x - n ln 2| <= ln(2)/2 (relative error < 2e-7). Chunk attention
// takes ~10^7 exponentials per layer; the scalar expf would cost as much as both products.
inline Vec::T Exp(Vec::T x) {
  x = Vec::MaxOf(x, Vec::Set(-87.0f));  // 2^-126 and below are flushed by the caller
  const Vec::T n = Vec::Round(Vec::Mul(x, Vec::Set(1.44269504f)));
  Vec::T r = Vec::Fnma(n, Vec::Set(0.693145752f), x);
  r = Vec::Fnma(n, Vec::Set(1.42860677e-6f), r);
  Vec::T p = Vec::Set(1.0f / 720);
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = Vec::Fma(p, r, Vec::Set(c));
  return Vec::Mul(p, Vec::Pow2(n));
}

// s[j] = exp(s[j] - m) for j < len; returns their sum.
float ExpSum(float* s, int64_t len, float m) {
  const Vec::T mv = Vec::Set(m);
  Vec::T acc = Vec::Zero();
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
    const Vec::T e = Exp(Vec::Sub(Vec::Load(s + j), mv));
    Vec::Store(s + j, e);
    acc = Vec::Add(acc, e);
  }
  float sum = LaneSum(acc);
  for (; j < len; ++j) sum += s[j] = std::exp(s[j] - m);
  return sum;
}

float Max(const float* s, int64_t len) {
  Vec::T acc = Vec::Set(-INFINITY);
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) acc = Vec::MaxOf(acc, Vec::Load(s + j));
  float m = LaneMax(acc);
  for (; j < len; ++j) m = std::max(m, s[j]);
  return m;
}

// Rows of weights per Mix tile: RG x NV accumulators + NV values + 1 broadcast fit the registers
// (AVX2 keeps the 3 x 4 tile it has always used).
template <int NV>
constexpr int kMixRows = (Vec::kRegisters == 16 && NV == 4) ? 3 : (Vec::kRegisters - NV - 1) / NV;

template <int NV, bool kByColumn>
void MixRowsBy(const float* w, int64_t w_stride, int64_t r_dim, const float* values,
               int64_t f_dim, int64_t len, float* out) {
  for (int64_t r = 0; r < r_dim; r += kMixRows<NV>) {
    const float* wr = Weight<kByColumn>(w, w_stride, r, 0);
    float* o = out + r * f_dim;
    WithRows<1, kMixRows<NV>>(r_dim - r, [&]<int RG>() {
      MixTile<RG, NV, kByColumn>(wr, w_stride, values, f_dim, len, o);
    });
  }
}

// Tiles of 4 vectors of features where F allows (F = 64 on AVX-512, any multiple of 32 on AVX2),
// else of 2 (F = 32 on AVX-512), else the plain loop.
template <bool kByColumn>
void MixRows(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
             int64_t len, float* out) {
  if (f_dim % (4 * kLanes) == 0)
    return MixRowsBy<4, kByColumn>(w, w_stride, r_dim, values, f_dim, len, out);
  if (f_dim % (2 * kLanes) == 0)
    return MixRowsBy<2, kByColumn>(w, w_stride, r_dim, values, f_dim, len, out);
  MixPlain<kByColumn>(w, w_stride, r_dim, values, f_dim, len, out);
}

#else  // portable loops (the compiler vectorises what it can)

constexpr const char* kIsa = "portable";

void Scores(const float* q, int64_t r_dim, const float* keys, int64_t f_dim, int64_t stride,
            int64_t len, float* scores, int64_t scores_stride) {
  for (int64_t r = 0; r < r_dim; ++r) {
    float* s = scores + r * scores_stride;
    std::fill(s, s + len, 0.0f);
    for (int64_t f = 0; f < f_dim; ++f) {
      const float qf = q[r * f_dim + f];
      const float* row = keys + f * stride;
      for (int64_t j = 0; j < len; ++j) s[j] += qf * row[j];
    }
  }
}

template <bool kByColumn>
void MixRows(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
             int64_t len, float* out) {
  MixPlain<kByColumn>(w, w_stride, r_dim, values, f_dim, len, out);
}

float ExpSum(float* s, int64_t len, float m) {
  float sum = 0.0f;
  for (int64_t j = 0; j < len; ++j) sum += s[j] = std::exp(s[j] - m);
  return sum;
}

float Max(const float* s, int64_t len) {
  float m = -INFINITY;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, s[j]);
  return m;
}

#endif

// out[r][:] += sum_j w[r][j] * values[j, :], j < len (weights rows w_stride apart).
void Mix(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
         int64_t len, float* out) {
  MixRows<false>(w, w_stride, r_dim, values, f_dim, len, out);
}

// out[r][:] += sum_j w[j][r] * values[j, :], j < len: the weights given transposed ([len, rows],
// rows w_stride apart), as the backward's key-major products (dK = dS^T Q, dV = P^T dO) read
// the [queries, keys] tiles it has without transposing them.
void MixTransposed(const float* w, int64_t w_stride, int64_t r_dim, const float* values,
                   int64_t f_dim, int64_t len, float* out) {
  MixRows<true>(w, w_stride, r_dim, values, f_dim, len, out);
}

// Scores and Mix over slot blocks (block outer, query groups inner; see kBlock).
void BlockedScores(const float* q, int64_t r_dim, const float* keys, int64_t f_dim, int64_t stride,
                   int64_t len, float* scores, int64_t scores_stride) {
  for (int64_t j = 0; j < len; j += kBlock)
    Scores(q, r_dim, keys + j, f_dim, stride, std::min(kBlock, len - j), scores + j,
           scores_stride);
}

void BlockedMix(const float* w, int64_t w_stride, int64_t r_dim, const float* values,
                int64_t f_dim, int64_t len, float* out) {
  for (int64_t j = 0; j < len; j += kBlock)
    Mix(w + j, w_stride, r_dim, values + j * f_dim, f_dim, std::min(kBlock, len - j), out);
}

// Units of work claimed in chunks from a shared counter by the caller and by helper tasks on XLA's
// pool, each runner with its own scratch of ``scratch_floats``. The caller waits only for chunks a
// helper has claimed (running, so they finish): a helper that starts late finds no work left, so
// a busy pool never blocks the call. ``threads``: most pool threads to use (0: all).
template <typename Fn>
void ForEachUnit(ffi::ThreadPool& pool, int64_t units, int64_t threads, int64_t scratch_floats,
                 Fn fn) {
  struct Shared {
    explicit Shared(Fn f) : fn(std::move(f)) {}
    Fn fn;
    int64_t units, chunk, chunks, scratch_floats;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> finished{0};
  };
  auto sh = std::make_shared<Shared>(std::move(fn));
  sh->units = units;
  sh->chunk = std::max<int64_t>(1, units / 32);
  sh->chunks = (units + sh->chunk - 1) / sh->chunk;
  sh->scratch_floats = scratch_floats;
  auto drain = [](Shared& s) {
    std::vector<float> scratch(s.scratch_floats);
    for (;;) {
      const int64_t c = s.next.fetch_add(1, std::memory_order_relaxed);
      if (c >= s.chunks) return;
      const int64_t end = std::min(s.units, (c + 1) * s.chunk);
      for (int64_t u = c * s.chunk; u < end; ++u) s.fn(u, scratch.data());
      s.finished.fetch_add(1, std::memory_order_release);
    }
  };
  const int64_t pool_threads = pool.num_threads();
  const int64_t limit = threads > 0 ? std::min(threads, pool_threads) : pool_threads;
  const int64_t helpers = std::min<int64_t>(limit - 1, sh->chunks - 1);
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([sh, drain] { drain(*sh); });
  drain(*sh);
  while (sh->finished.load(std::memory_order_acquire) < sh->chunks) std::this_thread::yield();
}

}  // namespace
}  // namespace arenarl

#endif  // ARENARL_ATTENTION_TILES_H_
