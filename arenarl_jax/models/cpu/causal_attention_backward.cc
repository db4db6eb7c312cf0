// The backward of causal self-attention over full sequences (the training forward's attention,
// models/causal_blocks.py) on CPU as an XLA FFI custom call; models/cpu/build.py builds it into
// the same library as cache_attention.cc, models/cpu/kernel.py calls it.
//
// From the forward's output O and per-query log-normaliser lse (kept by the remat policy), with
// delta = rowsum(dO * O) per query: P = exp(Q K^T - lse) over the visible keys, dV = P^T dO,
// dP = dO V^T, dS = P * (dP - delta), dQ = dS K, dK = dS^T Q (the flash-attention backward).
//
// Why a kernel: XLA:CPU runs the blocked jnp backward as five batched library products per query
// block around [queries, keys] temporaries that go through memory between them (and the
// element-wise passes), at a fraction of the machine's product rate. Here each (row, KV head) pair
// keeps its keys and values in cache, each tile of query tokens computes P and dS in two small
// scratch tiles that never leave cache, the masked (future) keys are never scored, and dK, dV are
// accumulated in place from the tiles as they are (the transposed products read them by column).
//
// Layouts (float32, row-major): q [N, K, T, R, F] (already scaled by F^-1/2, as the forward's),
// keys and values [N, K, T, F], dout [N, K, T, R, F], lse and delta [N, K, T, R]. Results: dq
// (the gradient of the scaled q) [N, K, T, R, F], dk and dv [N, K, T, F]. Token t sees keys 0..t.
#include "attention_tiles.h"

namespace {

using namespace arenarl;  // NOLINT: the kernels' own building blocks

struct Backward {
  const float* q;
  const float* k;
  const float* v;
  const float* dout;
  const float* lse;
  const float* delta;
  float* dq;
  float* dk;
  float* dv;
  int64_t n, kv, t, r, f;
};

// Query tokens per tile: 16 tokens of R = 3 queries give 48 rows, enough to reuse each key block
// from L1 across the register tiles while P and dS ([48, T] each) stay in L2.
constexpr int64_t kTileTokens = 16;

int64_t ScratchFloats(const Backward& pb) {
  return 2 * pb.f * pb.t + 2 * kTileTokens * pb.r * pb.t;
}

// to[f * rows + j] = from[j * cols + f]: 16 source rows at a time, so every written cache line is
// filled at once (a row-by-row copy writes F lines T * 4 bytes apart, which share a few cache sets
// and evict each other).
void Transpose(const float* from, int64_t rows, int64_t cols, float* to) {
  constexpr int64_t kRows = 16;
  for (int64_t j0 = 0; j0 < rows; j0 += kRows) {
    const int64_t j1 = std::min(rows, j0 + kRows);
    for (int64_t f = 0; f < cols; ++f)
      for (int64_t j = j0; j < j1; ++j) to[f * rows + j] = from[j * cols + f];
  }
}

// One (row, KV head) pair: all its T tokens' queries, tile by tile; the pair's dK and dV are
// written by this unit alone.
void Pair(const Backward& pb, int64_t pair, float* scratch) {
  const int64_t t_dim = pb.t, r_dim = pb.r, f_dim = pb.f, x_dim = t_dim * r_dim;
  const float* q = pb.q + pair * x_dim * f_dim;
  const float* dout = pb.dout + pair * x_dim * f_dim;
  const float* keys = pb.k + pair * t_dim * f_dim;
  const float* values = pb.v + pair * t_dim * f_dim;
  const float* lse = pb.lse + pair * x_dim;
  const float* delta = pb.delta + pair * x_dim;
  float* dq = pb.dq + pair * x_dim * f_dim;
  float* dk = pb.dk + pair * t_dim * f_dim;
  float* dv = pb.dv + pair * t_dim * f_dim;
  // Feature-major copies of the keys and values: the score tiles' layout ([F, T]).
  float* keys_t = scratch;
  float* values_t = keys_t + f_dim * t_dim;
  float* p = values_t + f_dim * t_dim;  // [tile rows, T]: P of the tile
  float* ds = p + kTileTokens * r_dim * t_dim;  // [tile rows, T]: dP, then dS
  Transpose(keys, t_dim, f_dim, keys_t);
  Transpose(values, t_dim, f_dim, values_t);
  std::fill(dk, dk + t_dim * f_dim, 0.0f);
  std::fill(dv, dv + t_dim * f_dim, 0.0f);
  for (int64_t t0 = 0; t0 < t_dim; t0 += kTileTokens) {
    const int64_t t1 = std::min(t_dim, t0 + kTileTokens), rows = (t1 - t0) * r_dim;
    const int64_t first = t0 * r_dim, seen_max = t1;  // the tile's last token sees keys < t1
    const float* q_tile = q + first * f_dim;
    const float* dout_tile = dout + first * f_dim;
    BlockedScores(q_tile, rows, keys_t, f_dim, t_dim, seen_max, p, t_dim);
    BlockedScores(dout_tile, rows, values_t, f_dim, t_dim, seen_max, ds, t_dim);
    for (int64_t x = 0; x < rows; ++x) {
      const int64_t seen = t0 + x / r_dim + 1;
      float* px = p + x * t_dim;
      float* dx = ds + x * t_dim;
      ExpSum(px, seen, lse[first + x]);  // P = exp(S - lse): already normalised
      const float d = delta[first + x];
      for (int64_t j = 0; j < seen; ++j) dx[j] = px[j] * (dx[j] - d);
      std::fill(px + seen, px + seen_max, 0.0f);  // the tile's future keys: no weight
      std::fill(dx + seen, dx + seen_max, 0.0f);
    }
    float* dq_tile = dq + first * f_dim;
    std::fill(dq_tile, dq_tile + rows * f_dim, 0.0f);
    BlockedMix(ds, t_dim, rows, keys, f_dim, seen_max, dq_tile);
    MixTransposed(p, t_dim, seen_max, dout_tile, f_dim, rows, dv);
    MixTransposed(ds, t_dim, seen_max, q_tile, f_dim, rows, dk);
  }
}

ffi::Error BackwardImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                        ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> dout,
                        ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::F32> delta,
                        ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk,
                        ffi::ResultBuffer<ffi::F32> dv) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 5 || kd.size() != 4 || vd.size() != 4)
    return ffi::Error::InvalidArgument(
        "causal_attention_backward: q needs rank 5, keys and values rank 4");
  const Backward pb{q.typed_data(),    k.typed_data(),    v.typed_data(),
                    dout.typed_data(), lse.typed_data(),  delta.typed_data(),
                    dq->typed_data(),  dk->typed_data(),  dv->typed_data(),
                    qd[0],             qd[1],             qd[2],
                    qd[3],             qd[4]};
  const int64_t queries = pb.n * pb.kv * pb.t * pb.r;
  const bool ok = kd[0] == pb.n && kd[1] == pb.kv && kd[2] == pb.t && kd[3] == pb.f &&
                  vd[0] == pb.n && vd[1] == pb.kv && vd[2] == pb.t && vd[3] == pb.f &&
                  dout.element_count() == queries * pb.f && lse.element_count() == queries &&
                  delta.element_count() == queries;
  if (!ok) return ffi::Error::InvalidArgument("causal_attention_backward: inconsistent shapes");
  ForEachUnit(pool, pb.n * pb.kv, 0, ScratchFloats(pb),
              [pb](int64_t pair, float* scratch) { Pair(pb, pair, scratch); });
  return ffi::Error::Success();
}

}  // namespace

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
