// Causal self-attention over full sequences on CPU, forward and backward, as XLA FFI custom calls:
// the training attention (models/causal_blocks.py holds the custom gradient; models/cpu/kernel.py
// calls these; models/cpu/build.py builds them into the same library as cache_attention.cc).
//
// Forward: per query, the softmax of its scaled scores against keys 0..t, the weighted values and
// the log-normaliser lse = max + log(sum of exp). Backward, from the forward's output O and lse
// (kept by the remat policy), with delta = rowsum(dO * O) per query: P = exp(Q K^T - lse) over the
// visible keys, dV = P^T dO, dP = dO V^T, dS = P * (dP - delta), dQ = dS K, dK = dS^T Q (the
// flash-attention backward).
//
// Why kernels: XLA:CPU runs the blocked jnp attention as batched library products per query block
// around [queries, keys] temporaries that go through memory between them, at a fraction of the
// machine's product rate. Here each (row, KV head) pair keeps its keys and values in cache, each
// tile of query tokens forms its scores (and in the backward P and dS) in small scratch tiles that
// never leave cache, the masked (future) keys are never scored, and dK, dV accumulate in place from
// the tiles as they are (the transposed products read them by column). Both calls take the
// model's own layouts, gathering each pair's strided rows into scratch themselves: a layout change
// outside would be an XLA transpose of every q, k, v, output and gradient per layer, passes that
// are as slow as the attention's own products.
//
// Layouts (float32, row-major): q [N, T, K, R, F] (unscaled: the kernels scale by F^-1/2), keys
// and values [N, T, K, F], out and dout [N, T, K, R, F], lse [N, K, T, R]. Backward results: dq
// [N, T, K, R, F] (the gradient of the unscaled q), dk and dv [N, T, K, F]. Token t sees keys 0..t.
#include "attention_tiles.h"

namespace {

using namespace arenarl;  // NOLINT: the kernels' own building blocks

// The shapes of one call; a pair is a (row n, KV head h), unit of work of both kernels.
struct Dims {
  int64_t n, t, kv, r, f;
  int64_t QueryStride() const { return kv * r * f; }  // between one token's queries and the next's
  int64_t KeyStride() const { return kv * f; }
  int64_t QueryBase(int64_t pair) const { return ((pair / kv) * t * kv + pair % kv) * r * f; }
  int64_t KeyBase(int64_t pair) const { return ((pair / kv) * t * kv + pair % kv) * f; }
};

// Query tokens per tile: 16 tokens of R = 3 queries give 48 rows, enough to reuse each key block
// from L1 across the register tiles while the [48, T] score tiles stay in L2.
constexpr int64_t kTileTokens = 16;

// to[j * to_stride + c] = scale * from[j * from_stride + c] for j < rows, c < cols: a pair's
// strided rows gathered into contiguous scratch, or scattered back.
void CopyRows(const float* from, int64_t from_stride, int64_t rows, int64_t cols, float scale,
              float* to, int64_t to_stride) {
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < cols; ++c) to[j * to_stride + c] = scale * from[j * from_stride + c];
}

// to[c * rows + j] = from[j * stride + c]: 16 source rows at a time, so every written cache line
// is filled at once (a row-by-row copy writes F lines T * 4 bytes apart, which share a few cache
// sets and evict each other).
void Transpose(const float* from, int64_t rows, int64_t cols, int64_t stride, float* to) {
  constexpr int64_t kRows = 16;
  for (int64_t j0 = 0; j0 < rows; j0 += kRows) {
    const int64_t j1 = std::min(rows, j0 + kRows);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t j = j0; j < j1; ++j) to[c * rows + j] = from[j * stride + c];
  }
}

struct Forward {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* lse;
  Dims d;
};

int64_t ForwardScratch(const Dims& d) {
  const int64_t rows = kTileTokens * d.r;
  return 2 * d.f * d.t + rows * (2 * d.f + d.t + 1);
}

void ForwardPair(const Forward& pb, int64_t pair, float* scratch) {
  const Dims& d = pb.d;
  const int64_t t_dim = d.t, r_dim = d.r, f_dim = d.f, rf = d.r * d.f;
  const float scale = 1.0f / std::sqrt(static_cast<float>(f_dim));
  float* keys_t = scratch;                  // [F, T]: the score tiles' layout
  float* values = keys_t + f_dim * t_dim;   // [T, F]
  float* q_tile = values + t_dim * f_dim;   // [tile rows, F], scaled
  float* o_tile = q_tile + kTileTokens * rf;
  float* s = o_tile + kTileTokens * rf;     // [tile rows, T]
  float* inv = s + kTileTokens * r_dim * t_dim;
  Transpose(pb.k + d.KeyBase(pair), t_dim, f_dim, d.KeyStride(), keys_t);
  CopyRows(pb.v + d.KeyBase(pair), d.KeyStride(), t_dim, f_dim, 1.0f, values, f_dim);
  const float* q = pb.q + d.QueryBase(pair);
  float* out = pb.out + d.QueryBase(pair);
  float* lse = pb.lse + pair * t_dim * r_dim;
  for (int64_t t0 = 0; t0 < t_dim; t0 += kTileTokens) {
    const int64_t t1 = std::min(t_dim, t0 + kTileTokens), rows = (t1 - t0) * r_dim;
    CopyRows(q + t0 * d.QueryStride(), d.QueryStride(), t1 - t0, rf, scale, q_tile, rf);
    BlockedScores(q_tile, rows, keys_t, f_dim, t_dim, t1, s, t_dim);
    for (int64_t x = 0; x < rows; ++x) {
      const int64_t seen = t0 + x / r_dim + 1;
      float* sx = s + x * t_dim;
      const float m = Max(sx, seen), sum = ExpSum(sx, seen, m);
      inv[x] = 1.0f / sum;
      lse[t0 * r_dim + x] = m + std::log(sum);
      std::fill(sx + seen, sx + t1, 0.0f);  // the tile's future keys: no weight
    }
    std::fill(o_tile, o_tile + rows * f_dim, 0.0f);
    BlockedMix(s, t_dim, rows, values, f_dim, t1, o_tile);
    for (int64_t x = 0; x < rows; ++x)
      for (int64_t c = 0; c < f_dim; ++c) o_tile[x * f_dim + c] *= inv[x];
    CopyRows(o_tile, rf, t1 - t0, rf, 1.0f, out + t0 * d.QueryStride(), d.QueryStride());
  }
}

struct Backward {
  const float* q;
  const float* k;
  const float* v;
  const float* out;
  const float* lse;
  const float* dout;
  float* dq;
  float* dk;
  float* dv;
  Dims d;
};

int64_t BackwardScratch(const Dims& d) {
  const int64_t rows = kTileTokens * d.r;
  return 5 * d.f * d.t + rows * (3 * d.f + 2 * d.t + 1);
}

// One (row, KV head) pair: all its T tokens' queries, tile by tile; the pair's dK and dV are
// accumulated in scratch and written by this unit alone.
void BackwardPair(const Backward& pb, int64_t pair, float* scratch) {
  const Dims& d = pb.d;
  const int64_t t_dim = d.t, r_dim = d.r, f_dim = d.f, rf = d.r * d.f, tf = d.t * d.f;
  const float scale = 1.0f / std::sqrt(static_cast<float>(f_dim));
  float* keys_t = scratch;       // [F, T]
  float* values_t = keys_t + tf;  // [F, T]
  float* keys = values_t + tf;   // [T, F]
  float* dk = keys + tf;         // [T, F]
  float* dv = dk + tf;           // [T, F]
  float* q_tile = dv + tf;       // [tile rows, F] each: the scaled queries, dO, then dQ
  float* do_tile = q_tile + kTileTokens * rf;
  float* dq_tile = do_tile + kTileTokens * rf;
  float* p = dq_tile + kTileTokens * rf;  // [tile rows, T]: P of the tile
  float* ds = p + kTileTokens * r_dim * t_dim;  // [tile rows, T]: dP, then dS
  float* delta = ds + kTileTokens * r_dim * t_dim;
  const float* k_pair = pb.k + d.KeyBase(pair);
  Transpose(k_pair, t_dim, f_dim, d.KeyStride(), keys_t);
  Transpose(pb.v + d.KeyBase(pair), t_dim, f_dim, d.KeyStride(), values_t);
  CopyRows(k_pair, d.KeyStride(), t_dim, f_dim, 1.0f, keys, f_dim);
  std::fill(dk, dk + 2 * tf, 0.0f);  // dk and dv
  const int64_t qs = d.QueryStride(), base = d.QueryBase(pair);
  const float* lse = pb.lse + pair * t_dim * r_dim;
  for (int64_t t0 = 0; t0 < t_dim; t0 += kTileTokens) {
    const int64_t t1 = std::min(t_dim, t0 + kTileTokens), rows = (t1 - t0) * r_dim;
    const int64_t at = base + t0 * qs;
    CopyRows(pb.dout + at, qs, t1 - t0, rf, 1.0f, do_tile, rf);
    CopyRows(pb.out + at, qs, t1 - t0, rf, 1.0f, dq_tile, rf);  // O, for delta; then dQ
    for (int64_t x = 0; x < rows; ++x) {
      float sum = 0.0f;
      for (int64_t c = 0; c < f_dim; ++c) sum += do_tile[x * f_dim + c] * dq_tile[x * f_dim + c];
      delta[x] = sum;
    }
    CopyRows(pb.q + at, qs, t1 - t0, rf, scale, q_tile, rf);
    BlockedScores(q_tile, rows, keys_t, f_dim, t_dim, t1, p, t_dim);
    BlockedScores(do_tile, rows, values_t, f_dim, t_dim, t1, ds, t_dim);
    for (int64_t x = 0; x < rows; ++x) {
      const int64_t seen = t0 + x / r_dim + 1;
      float* px = p + x * t_dim;
      float* dx = ds + x * t_dim;
      ExpSum(px, seen, lse[t0 * r_dim + x]);  // P = exp(S - lse): already normalised
      const float dl = delta[x];
      for (int64_t j = 0; j < seen; ++j) dx[j] = px[j] * (dx[j] - dl);
      std::fill(px + seen, px + t1, 0.0f);  // the tile's future keys: no weight
      std::fill(dx + seen, dx + t1, 0.0f);
    }
    std::fill(dq_tile, dq_tile + rows * f_dim, 0.0f);
    BlockedMix(ds, t_dim, rows, keys, f_dim, t1, dq_tile);
    MixTransposed(p, t_dim, t1, do_tile, f_dim, rows, dv);
    MixTransposed(ds, t_dim, t1, q_tile, f_dim, rows, dk);
    CopyRows(dq_tile, rf, t1 - t0, rf, scale, pb.dq + at, qs);  // d/dq = scale * d/d(scaled q)
  }
  CopyRows(dk, f_dim, t_dim, f_dim, 1.0f, pb.dk + d.KeyBase(pair), d.KeyStride());
  CopyRows(dv, f_dim, t_dim, f_dim, 1.0f, pb.dv + d.KeyBase(pair), d.KeyStride());
}

// Sets *d from q [N, T, K, R, F]; false unless keys and values are [N, T, K, F].
bool CheckShapes(ffi::Buffer<ffi::F32>& q, ffi::Buffer<ffi::F32>& k, ffi::Buffer<ffi::F32>& v,
                 Dims* d) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 5 || kd.size() != 4 || vd.size() != 4) return false;
  *d = Dims{qd[0], qd[1], qd[2], qd[3], qd[4]};
  for (const auto& x : {kd, vd})
    if (x[0] != d->n || x[1] != d->t || x[2] != d->kv || x[3] != d->f) return false;
  return true;
}

ffi::Error ForwardImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                       ffi::Buffer<ffi::F32> v, ffi::ResultBuffer<ffi::F32> out,
                       ffi::ResultBuffer<ffi::F32> lse) {
  Dims d{};
  if (!CheckShapes(q, k, v, &d) || out->element_count() != q.element_count() ||
      lse->element_count() * d.f != q.element_count())
    return ffi::Error::InvalidArgument(
        "causal_attention: needs q [N, T, K, R, F], keys and values [N, T, K, F]");
  const Forward pb{q.typed_data(), k.typed_data(), v.typed_data(), out->typed_data(),
                   lse->typed_data(), d};
  ForEachUnit(pool, d.n * d.kv, 0, ForwardScratch(d),
              [pb](int64_t pair, float* scratch) { ForwardPair(pb, pair, scratch); });
  return ffi::Error::Success();
}

ffi::Error BackwardImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                        ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> out,
                        ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::F32> dout,
                        ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk,
                        ffi::ResultBuffer<ffi::F32> dv) {
  Dims d{};
  const int64_t size = q.element_count();
  if (!CheckShapes(q, k, v, &d) || out.element_count() != size || dout.element_count() != size ||
      lse.element_count() * d.f != size || dq->element_count() != size ||
      dk->element_count() != k.element_count() || dv->element_count() != v.element_count())
    return ffi::Error::InvalidArgument(
        "causal_attention_backward: needs q, out, dout [N, T, K, R, F], keys and values "
        "[N, T, K, F], lse [N, K, T, R]");
  const Backward pb{q.typed_data(),  k.typed_data(),   v.typed_data(),
                    out.typed_data(), lse.typed_data(), dout.typed_data(),
                    dq->typed_data(), dk->typed_data(), dv->typed_data(), d};
  ForEachUnit(pool, d.n * d.kv, 0, BackwardScratch(d),
              [pb](int64_t pair, float* scratch) { BackwardPair(pb, pair, scratch); });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArenaCausalAttention, ForwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(ArenaCausalAttentionBackward, BackwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
