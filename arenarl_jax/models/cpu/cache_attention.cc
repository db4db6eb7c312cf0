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
#include "attention_tiles.h"

namespace {

using namespace arenarl;  // NOLINT: the kernels' own building blocks

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

// Query tokens taken together (up to kPassRows queries): the products run over key blocks
// (kBlock), each read once for all of them.
constexpr int64_t kPassRows = 24;
inline int64_t TokensPerPass(int64_t r) { return std::max<int64_t>(1, kPassRows / r); }
inline int64_t PassRows(int64_t r) { return std::max<int64_t>(kPassRows, r); }

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
  const int64_t units = pb.n * pb.kv * ((pb.t + pb.tile - 1) / pb.tile);
  ForEachUnit(pool, units, threads, PassRows(pb.r) * (pb.p + pb.s + 1),
              [pb](int64_t unit, float* scratch) { Unit(pb, unit, scratch); });
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

