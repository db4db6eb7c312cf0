// The building blocks of the CPU attention kernels (cache_attention.cc: attention against a KV
// cache; causal_attention.cc: the training attention of full sequences, forward and backward):
// register-tiled products of a few query rows with a block of keys (Scores) or of weight rows with
// a block of value rows (Mix), the vectorised exponential, and the work sharing over XLA's intra-op
// thread pool (ForEachUnit). Float32, row-major; AVX2 + FMA tiles where the compiler targets them,
// portable loops otherwise.
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

constexpr int64_t kAhead = 2;

// Lanes [0, n) of a vector (n < 8) with the rest zero, without reading past them.
inline __m256 LoadHead(const float* p, int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane));
}

// scores[r][j] = q[r] . keys[:, j] for RG queries (rows of q, F apart) and j < len; keys is
// [F, stride]. Register tile: RG queries x 16 slots, so each key is loaded once for all queries.
template <int RG>
void ScoresTile(const float* q, const float* keys, int64_t f_dim, int64_t stride, int64_t len,
                float* scores, int64_t scores_stride) {
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    __m256 acc[RG][2];
    for (int r = 0; r < RG; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t f = 0; f < f_dim; ++f) {
      const float* row = keys + f * stride + j;
      // A tile reads one cache line from each of F rows: too many streams for the hardware
      // prefetcher, so fetch the same rows' lines kAhead tiles ahead by hand.
      _mm_prefetch(reinterpret_cast<const char*>(row + 16 * kAhead), _MM_HINT_T0);
      const __m256 k0 = _mm256_loadu_ps(row), k1 = _mm256_loadu_ps(row + 8);
      for (int r = 0; r < RG; ++r) {
        const __m256 qr = _mm256_broadcast_ss(q + r * f_dim + f);
        acc[r][0] = _mm256_fmadd_ps(qr, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qr, k1, acc[r][1]);
      }
    }
    for (int r = 0; r < RG; ++r) {
      _mm256_storeu_ps(scores + r * scores_stride + j, acc[r][0]);
      _mm256_storeu_ps(scores + r * scores_stride + j + 8, acc[r][1]);
    }
  }
  for (; j < len; j += 8) {
    const int64_t n = std::min<int64_t>(8, len - j);
    __m256 acc[RG];
    for (int r = 0; r < RG; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t f = 0; f < f_dim; ++f) {
      const __m256 k0 = LoadHead(keys + f * stride + j, n);
      for (int r = 0; r < RG; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(q + r * f_dim + f), k0, acc[r]);
    }
    alignas(32) float tmp[8];
    for (int r = 0; r < RG; ++r) {
      _mm256_store_ps(tmp, acc[r]);
      std::copy(tmp, tmp + n, scores + r * scores_stride + j);
    }
  }
}

// out[r][:] += sum_j weight(r, j) * values[j, :] for RG rows of weights, j < len; values is
// [len, F] with F a multiple of 32. Register tile: RG rows x 32 features (fixed sizes, so the
// compiler keeps the accumulators in registers).
template <int RG, bool kByColumn>
void MixTile(const float* w, int64_t w_stride, const float* values, int64_t f_dim, int64_t len,
             float* out) {
  for (int64_t f0 = 0; f0 < f_dim; f0 += 32) {
    constexpr int nv = 4;
    __m256 acc[RG][nv];
    for (int r = 0; r < RG; ++r)
      for (int i = 0; i < nv; ++i) acc[r][i] = _mm256_loadu_ps(out + r * f_dim + f0 + 8 * i);
    for (int64_t j = 0; j < len; ++j) {
      const float* row = values + j * f_dim + f0;
      __m256 v[nv];
      for (int i = 0; i < nv; ++i) v[i] = _mm256_loadu_ps(row + 8 * i);
      for (int r = 0; r < RG; ++r) {
        const __m256 wr = _mm256_broadcast_ss(Weight<kByColumn>(w, w_stride, r, j));
        for (int i = 0; i < nv; ++i) acc[r][i] = _mm256_fmadd_ps(wr, v[i], acc[r][i]);
      }
    }
    for (int r = 0; r < RG; ++r)
      for (int i = 0; i < nv; ++i) _mm256_storeu_ps(out + r * f_dim + f0 + 8 * i, acc[r][i]);
  }
}

// The scores of r_dim queries, in groups of up to 6 (12 accumulators + 2 keys + 1 broadcast fit
// the 16 vector registers); the values' product in groups of up to 3 (3 x 4 accumulators).
void Scores(const float* q, int64_t r_dim, const float* keys, int64_t f_dim, int64_t stride,
            int64_t len, float* scores, int64_t scores_stride) {
  for (int64_t r = 0; r < r_dim; r += 6) {
    const float* qr = q + r * f_dim;
    float* sr = scores + r * scores_stride;
    switch (std::min<int64_t>(6, r_dim - r)) {
      case 1: ScoresTile<1>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      case 2: ScoresTile<2>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      case 3: ScoresTile<3>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      case 4: ScoresTile<4>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      case 5: ScoresTile<5>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      default: ScoresTile<6>(qr, keys, f_dim, stride, len, sr, scores_stride);
    }
  }
}

// exp(x) for x <= 0 (softmax inputs after subtracting the maximum): 2^n * p(x - n ln 2) with a
// degree-6 Taylor polynomial on |x - n ln 2| <= ln(2)/2 (relative error < 2e-7). Chunk attention
// takes ~10^7 exponentials per layer; the scalar expf would cost as much as both products.
inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));  // 2^-126 and below are flushed by the caller
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f})
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                       _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// s[j] = exp(s[j] - m) for j < len; returns their sum.
float ExpSum(float* s, int64_t len, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = 0.0f;
  for (const float x : lanes) sum += x;
  for (; j < len; ++j) sum += s[j] = std::exp(s[j] - m);
  return sum;
}

float Max(const float* s, int64_t len) {
  __m256 acc = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(s + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float m = -INFINITY;
  for (const float x : lanes) m = std::max(m, x);
  for (; j < len; ++j) m = std::max(m, s[j]);
  return m;
}

template <bool kByColumn>
void MixRows(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
             int64_t len, float* out) {
  if (f_dim % 32) return MixPlain<kByColumn>(w, w_stride, r_dim, values, f_dim, len, out);
  for (int64_t r = 0; r < r_dim; r += 3) {
    const float* wr = Weight<kByColumn>(w, w_stride, r, 0);
    float* o = out + r * f_dim;
    switch (std::min<int64_t>(3, r_dim - r)) {
      case 1: MixTile<1, kByColumn>(wr, w_stride, values, f_dim, len, o); break;
      case 2: MixTile<2, kByColumn>(wr, w_stride, values, f_dim, len, o); break;
      default: MixTile<3, kByColumn>(wr, w_stride, values, f_dim, len, o);
    }
  }
}

#else  // portable loops (the compiler vectorises what it can)

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
