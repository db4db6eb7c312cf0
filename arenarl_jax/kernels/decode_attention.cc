// Decode attention on CPU as an XLA FFI custom call (models/decode_attention.py builds, loads and
// calls it). One query token per row: each (row, KV head) attends to the first count[n] slots of
// its own key/value buffers and the first prefix_len[b] slots of its prompt's shared prefix, with
// one softmax over both parts. Before attending, each row's new key and value are written into
// its buffers at slot[n] (dropped when outside [0, S)): the buffers are aliased from input to
// output, so the cache is updated in place without XLA's scatter.
//
// Why a kernel: XLA:CPU runs decode attention as two batched library products per layer that pack
// every (row, KV head)'s [F, S] operand per call and read every slot of the buffers, filled or
// not, plus a scatter per buffer for the new token. Here each (row, KV head) streams only its
// visible keys and values once (register-tiled, keys prefetched by hand), and the work is split
// over XLA's intra-op thread pool.
//
// Layouts (float32, row-major): q [N, K, R, F] (already scaled by F^-1/2), keys [N, K, F, S],
// values [N, K, S, F], new key and value [N, K, F], slot [N] int32, count [N] int32, prefix keys
// [B, K, F, P], prefix values [B, K, P, F], prefix_len [B] int32, row0 [] int32 (global index of
// local row 0: rows may be a shard). Results: out [N, K, R, F], then the updated keys and values.
// Attributes: group = rows per prompt (row n belongs to prompt (row0 + n) / group); threads = most
// pool threads to use (0: all).
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
  int64_t n, kv, r, f, s, b, p, group, row0;
};

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

// Both products for all R queries, in groups of up to 3 (12 accumulators + loads fit the 16
// vector registers).
void Scores(const float* q, int64_t r_dim, const float* keys, int64_t f_dim, int64_t stride,
            int64_t len, float* scores, int64_t scores_stride) {
  for (int64_t r = 0; r < r_dim; r += 3) {
    const float* qr = q + r * f_dim;
    float* sr = scores + r * scores_stride;
    switch (std::min<int64_t>(3, r_dim - r)) {
      case 1: ScoresTile<1>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      case 2: ScoresTile<2>(qr, keys, f_dim, stride, len, sr, scores_stride); break;
      default: ScoresTile<3>(qr, keys, f_dim, stride, len, sr, scores_stride);
    }
  }
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

#endif

// One (row, KV head): its R queries against its prefix and own slots. scratch holds R x (P + S)
// floats: per query its prefix scores, then its own-slot scores.
void Unit(const Problem& pb, int64_t unit, float* scratch) {
  const int64_t n = unit / pb.kv, h = unit % pb.kv;
  float* keys = pb.k + (n * pb.kv + h) * pb.f * pb.s;
  float* values = pb.v + (n * pb.kv + h) * pb.s * pb.f;
  if (const int64_t at = pb.slot[n]; at >= 0 && at < pb.s) {
    const float* k_new = pb.k_new + (n * pb.kv + h) * pb.f;
    const float* v_new = pb.v_new + (n * pb.kv + h) * pb.f;
    for (int64_t f = 0; f < pb.f; ++f) keys[f * pb.s + at] = k_new[f];
    std::copy(v_new, v_new + pb.f, values + at * pb.f);
  }
  const int64_t own = std::clamp<int64_t>(pb.count[n], 0, pb.s);
  const int64_t prompt = std::clamp<int64_t>((pb.row0 + n) / pb.group, 0, pb.b - 1);
  const int64_t pre = std::clamp<int64_t>(pb.plen[prompt], 0, pb.p);
  const int64_t total = pre + own, width = pb.p + pb.s;
  const float* q = pb.q + (n * pb.kv + h) * pb.r * pb.f;
  float* out = pb.out + (n * pb.kv + h) * pb.r * pb.f;
  std::fill(out, out + pb.r * pb.f, 0.0f);
  if (total == 0) return;  // nothing visible (a finished row's dropped token): zeros
  const float* pkeys = pb.pk + (prompt * pb.kv + h) * pb.f * pb.p;
  const float* pvalues = pb.pv + (prompt * pb.kv + h) * pb.p * pb.f;
  Scores(q, pb.r, pkeys, pb.f, pb.p, pre, scratch, width);
  Scores(q, pb.r, keys, pb.f, pb.s, own, scratch + pre, width);
  float* inv = scratch + pb.r * width;
  for (int64_t r = 0; r < pb.r; ++r) {
    float* s = scratch + r * width;
    float m = s[0];
    for (int64_t j = 1; j < total; ++j) m = std::max(m, s[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < total; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    inv[r] = 1.0f / sum;
  }
  Mix(scratch, width, pb.r, pvalues, pb.f, pre, out);
  Mix(scratch + pre, width, pb.r, values, pb.f, own, out);
  for (int64_t r = 0; r < pb.r; ++r)
    for (int64_t f = 0; f < pb.f; ++f) out[r * pb.f + f] *= inv[r];
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
  std::vector<float> scratch(sh.pb.r * (sh.pb.p + sh.pb.s + 1));
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
                ffi::ResultBuffer<ffi::F32> v_out, int64_t group, int64_t threads) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  const auto pkd = pk.dimensions(), pvd = pv.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || pkd.size() != 4 || pvd.size() != 4)
    return ffi::Error::InvalidArgument("decode_attention: q, keys, values, prefix need rank 4");
  // XLA aliases the cache outputs with the inputs; should it ever hand over separate buffers,
  // start them from the inputs.
  if (k_out->typed_data() != k.typed_data())
    std::copy(k.typed_data(), k.typed_data() + k.element_count(), k_out->typed_data());
  if (v_out->typed_data() != v.typed_data())
    std::copy(v.typed_data(), v.typed_data() + v.element_count(), v_out->typed_data());
  Problem pb{q.typed_data(), k_out->typed_data(), v_out->typed_data(), k_new.typed_data(),
             v_new.typed_data(), slot.typed_data(), count.typed_data(), pk.typed_data(),
             pv.typed_data(), plen.typed_data(), out->typed_data(), qd[0], qd[1], qd[2], qd[3],
             kd[3], pkd[0], pkd[3], group, row0.typed_data()[0]};
  const bool ok = kd[0] == pb.n && kd[1] == pb.kv && kd[2] == pb.f && vd[0] == pb.n &&
                  vd[1] == pb.kv && vd[2] == pb.s && vd[3] == pb.f && pkd[1] == pb.kv &&
                  pkd[2] == pb.f && pvd[0] == pb.b && pvd[1] == pb.kv && pvd[2] == pb.p &&
                  pvd[3] == pb.f && count.element_count() == pb.n &&
                  slot.element_count() == pb.n && k_new.element_count() == pb.n * pb.kv * pb.f &&
                  v_new.element_count() == pb.n * pb.kv * pb.f &&
                  plen.element_count() == pb.b && pb.b > 0 && group > 0;
  if (!ok) return ffi::Error::InvalidArgument("decode_attention: inconsistent shapes");
  auto sh = std::make_shared<Shared>();
  sh->pb = pb;
  sh->units = pb.n * pb.kv;
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArenaDecodeAttention, Impl,
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
                                  .Attr<int64_t>("group")
                                  .Attr<int64_t>("threads"));
