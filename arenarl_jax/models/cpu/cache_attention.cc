// Attention against the KV cache on CPU as an XLA FFI custom call (models/cpu/build.py builds and
// loads it, models/cpu/kernel.py calls it), for one query token per row (decode) or a chunk of T
// tokens per row (prefill, extend, the judge's text). Token t of row n attends to the first
// count[n, t] slots of the row's own key/value buffers and the first prefix_len[b] slots of its
// prompt's shared prefix, with one softmax over both parts. Decode first writes each row's new key and value into its
// buffers at slot[n] (dropped when outside [0, S)): the buffers are aliased from input to output,
// so the cache is updated in place without XLA's scatter (chunks are written by the caller).
//
// Why a kernel: XLA:CPU runs this attention as two batched library products per layer around a
// materialised [N, K, T*R, S] score tensor: at decode the products pack every (row, KV head)'s
// operand per call and read every slot of the buffers, filled or not; for chunks the score tensor
// (tens of MB per layer) makes the softmax passes memory-bound and every query reads every slot,
// including the causal future. Here each query reads only its visible keys and values, the scores
// stay in a small per-thread buffer, the products are register-tiled (keys prefetched by hand) and
// the exponential is vectorised; the work is split over XLA's intra-op thread pool.
//
// Layouts (float32, row-major): q [N, K, T, R, F] (already scaled by F^-1/2), keys [N, K, F, S],
// values [N, K, S, F], new key and value [N, K, F], slot [N] int32 (-1 or out of range: no write;
// only with T = 1), count [N, T] int32, prefix keys [B, K, F, P], prefix values [B, K, P, F],
// prefix_len [B] int32, row0 [] int32 (global index of local row 0: rows may be a shard). Results:
// out [N, K, T, R, F], the updated keys and values, and lse [N, K, T, R] = per query the log of
// its softmax normaliser (max + log sum of exp; -1e30 when it sees nothing), with which a caller
// merges this attention with one over other keys (the judge's score branches). Attributes: group =
// rows per prompt (row n belongs to prompt (row0 + n) / group); threads = most pool threads to use
// (0: all).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Problem {
  const float* q;
  float* k;  // the output buffers (aliased with the inputs): read, and written at slot
  float* v;
  const float* k_new;
  const float* v_new;
  const int32_t* slot;
  const int32_t* count;
  const float* pk;
  const float* pv;
  const int32_t* plen;
  float* out;
  float* lse;  // per query: log of the softmax's normaliser (max + log sum), -1e30 if none seen
  int64_t n, kv, t, r, f, s, b, p, group, row0;
  int64_t tile;  // query tokens per unit of work
};

// Query tokens taken together (up to kPassRows queries): the products run over blocks of kBlock
// slots, each block's keys and values (16 KB each at F = 64) read from memory once for all of
// them and then served from L1 to every group of queries in the register tiles.
constexpr int64_t kPassRows = 24;
constexpr int64_t kBlock = 64;
inline int64_t TokensPerPass(int64_t r) { return std::max<int64_t>(1, kPassRows / r); }
inline int64_t PassRows(int64_t r) { return std::max<int64_t>(kPassRows, r); }

// out[r][:] += sum_j w[r][j] * values[j, :] for R rows of weights (w_stride apart), j < len;
// values is [len, F]. The plain loop: the portable build, and feature sizes the tiles do not fit.
void MixPlain(const float* w, int64_t w_stride, int64_t r_dim, const float* values,
              int64_t f_dim, int64_t len, float* out) {
  for (int64_t r = 0; r < r_dim; ++r)
    for (int64_t j = 0; j < len; ++j) {
      const float wj = w[r * w_stride + j];
      for (int64_t f = 0; f < f_dim; ++f) out[r * f_dim + f] += wj * values[j * f_dim + f];
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

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

// out[r][:] += sum_j w[r][j] * values[j, :] for RG rows of weights (w_stride apart), j < len;
// values is [len, F] with F a multiple of 32. Register tile: RG rows x 32 features (fixed sizes,
// so the compiler keeps the accumulators in registers).
template <int RG>
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
        const __m256 wr = _mm256_broadcast_ss(w + r * w_stride + j);
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

void Mix(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
         int64_t len, float* out) {
  if (f_dim % 32) return MixPlain(w, w_stride, r_dim, values, f_dim, len, out);
  for (int64_t r = 0; r < r_dim; r += 3) {
    const float* wr = w + r * w_stride;
    float* o = out + r * f_dim;
    switch (std::min<int64_t>(3, r_dim - r)) {
      case 1: MixTile<1>(wr, w_stride, values, f_dim, len, o); break;
      case 2: MixTile<2>(wr, w_stride, values, f_dim, len, o); break;
      default: MixTile<3>(wr, w_stride, values, f_dim, len, o);
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

void Mix(const float* w, int64_t w_stride, int64_t r_dim, const float* values, int64_t f_dim,
         int64_t len, float* out) {
  MixPlain(w, w_stride, r_dim, values, f_dim, len, out);
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

// One unit: a (row, KV head) and a tile of its query tokens. Each token's R queries attend to
// the prompt's prefix and the first count[n, t] own slots. Tokens are taken a few at a time (their
// queries share key loads); a token that sees fewer own slots than the group's longest has the
// rest of its scores zeroed after the exponential. scratch holds PassRows x (P + S + 1) floats.
void Unit(const Problem& pb, int64_t unit, float* scratch) {
  const int64_t tiles = (pb.t + pb.tile - 1) / pb.tile;
  const int64_t pair = unit / tiles, t_begin = (unit % tiles) * pb.tile;
  const int64_t t_end = std::min(pb.t, t_begin + pb.tile);
  const int64_t n = pair / pb.kv, h = pair % pb.kv;
  float* keys = pb.k + pair * pb.f * pb.s;
  float* values = pb.v + pair * pb.s * pb.f;
  if (const int64_t at = pb.slot[n]; at >= 0 && at < pb.s) {  // only with t == 1 (checked)
    const float* k_new = pb.k_new + pair * pb.f;
    const float* v_new = pb.v_new + pair * pb.f;
    for (int64_t f = 0; f < pb.f; ++f) keys[f * pb.s + at] = k_new[f];
    std::copy(v_new, v_new + pb.f, values + at * pb.f);
  }
  const int64_t prompt = std::clamp<int64_t>((pb.row0 + n) / pb.group, 0, pb.b - 1);
  const int64_t pre = std::clamp<int64_t>(pb.plen[prompt], 0, pb.p);
  const float* pkeys = pb.pk + (prompt * pb.kv + h) * pb.f * pb.p;
  const float* pvalues = pb.pv + (prompt * pb.kv + h) * pb.p * pb.f;
  const int64_t width = pb.p + pb.s, step = TokensPerPass(pb.r);
  float* inv = scratch + PassRows(pb.r) * width;
  for (int64_t t0 = t_begin; t0 < t_end; t0 += step) {
    const int64_t t1 = std::min(t_end, t0 + step), rows = (t1 - t0) * pb.r;
    const int32_t* count = pb.count + n * pb.t;
    int64_t own = 0;
    for (int64_t t = t0; t < t1; ++t)
      own = std::max<int64_t>(own, std::clamp<int64_t>(count[t], 0, pb.s));
    const int64_t first = (pair * pb.t + t0) * pb.r, offset = first * pb.f;
    const float* q = pb.q + offset;
    float* out = pb.out + offset;
    float* lse = pb.lse + first;
    std::fill(out, out + rows * pb.f, 0.0f);
    std::fill(lse, lse + rows, -1e30f);
    if (pre + own == 0) continue;  // nothing visible (e.g. a finished row's dropped token): zeros
    BlockedScores(q, rows, pkeys, pb.f, pb.p, pre, scratch, width);
    BlockedScores(q, rows, keys, pb.f, pb.s, own, scratch + pre, width);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t seen = pre + std::clamp<int64_t>(count[t], 0, pb.s);
      for (int64_t r = (t - t0) * pb.r; r < (t - t0 + 1) * pb.r; ++r) {
        float* s = scratch + r * width;
        if (seen) {
          const float m = Max(s, seen), sum = ExpSum(s, seen, m);
          inv[r] = 1.0f / sum;
          lse[r] = m + std::log(sum);
        } else {
          inv[r] = 0.0f;
        }
        std::fill(s + seen, s + pre + own, 0.0f);
      }
    }
    BlockedMix(scratch, width, rows, pvalues, pb.f, pre, out);
    BlockedMix(scratch + pre, width, rows, values, pb.f, own, out);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t f = 0; f < pb.f; ++f) out[r * pb.f + f] *= inv[r];
  }
}

// Units are claimed in chunks from a shared counter by the caller and by helper tasks on XLA's
// pool. The caller waits only for chunks a helper has claimed (running, so they finish): a helper
// that starts late finds no work left, so a busy pool never blocks the call.
struct Shared {
  Problem pb;
  int64_t units, chunk, chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
};

void Drain(Shared& sh) {
  const int64_t rows = PassRows(sh.pb.r);
  std::vector<float> scratch(rows * (sh.pb.p + sh.pb.s + 1));
  for (;;) {
    const int64_t c = sh.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= sh.chunks) return;
    const int64_t end = std::min(sh.units, (c + 1) * sh.chunk);
    for (int64_t u = c * sh.chunk; u < end; ++u) Unit(sh.pb, u, scratch.data());
    sh.finished.fetch_add(1, std::memory_order_release);
  }
}

ffi::Error Impl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> k_new, ffi::Buffer<ffi::F32> v_new,
                ffi::Buffer<ffi::S32> slot, ffi::Buffer<ffi::S32> count, ffi::Buffer<ffi::F32> pk,
                ffi::Buffer<ffi::F32> pv, ffi::Buffer<ffi::S32> plen, ffi::Buffer<ffi::S32> row0,
                ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> k_out,
                ffi::ResultBuffer<ffi::F32> v_out, ffi::ResultBuffer<ffi::F32> lse,
                int64_t group, int64_t threads) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  const auto pkd = pk.dimensions(), pvd = pv.dimensions();
  if (qd.size() != 5 || kd.size() != 4 || vd.size() != 4 || pkd.size() != 4 || pvd.size() != 4)
    return ffi::Error::InvalidArgument(
        "cache_attention: q needs rank 5, keys, values and the prefix rank 4");
  // XLA aliases the cache outputs with the inputs; should it ever hand over separate buffers,
  // start them from the inputs.
  if (k_out->typed_data() != k.typed_data())
    std::copy(k.typed_data(), k.typed_data() + k.element_count(), k_out->typed_data());
  if (v_out->typed_data() != v.typed_data())
    std::copy(v.typed_data(), v.typed_data() + v.element_count(), v_out->typed_data());
  Problem pb{q.typed_data(), k_out->typed_data(), v_out->typed_data(), k_new.typed_data(),
             v_new.typed_data(), slot.typed_data(), count.typed_data(), pk.typed_data(),
             pv.typed_data(), plen.typed_data(), out->typed_data(), lse->typed_data(), qd[0],
             qd[1], qd[2], qd[3], qd[4], kd[3], pkd[0], pkd[3], group, row0.typed_data()[0]};
  // Decode (one token) writes it first; longer chunks are written by the caller, so a unit's
  // write can never race another unit's read of the same buffers.
  pb.tile = pb.t == 1 ? 1 : 16;
  const bool ok = kd[0] == pb.n && kd[1] == pb.kv && kd[2] == pb.f && vd[0] == pb.n &&
                  vd[1] == pb.kv && vd[2] == pb.s && vd[3] == pb.f && pkd[1] == pb.kv &&
                  pkd[2] == pb.f && pvd[0] == pb.b && pvd[1] == pb.kv && pvd[2] == pb.p &&
                  pvd[3] == pb.f && count.element_count() == pb.n * pb.t &&
                  slot.element_count() == pb.n && k_new.element_count() == pb.n * pb.kv * pb.f &&
                  v_new.element_count() == pb.n * pb.kv * pb.f &&
                  lse->element_count() == pb.n * pb.kv * pb.t * pb.r &&
                  plen.element_count() == pb.b && pb.b > 0 && group > 0;
  if (!ok) return ffi::Error::InvalidArgument("cache_attention: inconsistent shapes");
  if (pb.t != 1)
    for (int64_t i = 0; i < pb.n; ++i)
      if (pb.slot[i] >= 0 && pb.slot[i] < pb.s)
        return ffi::Error::InvalidArgument("cache_attention: only one token can be written");
  auto sh = std::make_shared<Shared>();
  sh->pb = pb;
  sh->units = pb.n * pb.kv * ((pb.t + pb.tile - 1) / pb.tile);
  sh->chunk = std::max<int64_t>(1, sh->units / 32);
  sh->chunks = (sh->units + sh->chunk - 1) / sh->chunk;
  const int64_t pool_threads = pool.num_threads();
  const int64_t limit = threads > 0 ? std::min(threads, pool_threads) : pool_threads;
  const int64_t helpers = std::min<int64_t>(limit - 1, sh->chunks - 1);
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([sh] { Drain(*sh); });
  Drain(*sh);
  while (sh->finished.load(std::memory_order_acquire) < sh->chunks) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArenaCacheAttention, Impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("group")
                                  .Attr<int64_t>("threads"));
