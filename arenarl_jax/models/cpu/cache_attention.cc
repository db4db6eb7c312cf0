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
// including the causal future. Here each query reads only its visible keys and values, each key
// block once for all queries of a tile (an online softmax), so the scores stay in a per-thread
// buffer of a few KB whatever the cache length; the products are register-tiled (keys prefetched
// by hand) and the exponential is vectorised; the work is split over XLA's intra-op thread pool.
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

// Queries per unit (a tile's tokens x R): each key block is read once for all of them.
constexpr int64_t kMaxTileRows = 48;

// One unit: a (row, KV head) and a tile of its query tokens (all R queries of each). The keys
// are taken in blocks of kBlock slots, the prompt's shared prefix first, then the row's own
// slots, each block read ONCE for every query of the tile (an online softmax: each query keeps
// its running maximum, normaliser and weighted sum and rescales them when the maximum grows).
// So a unit streams its keys and values from memory once, and its scores (queries x kBlock),
// maxima and sums stay in L1; a query sees the prefix and the first count[n, t] own slots.
// scratch holds rows x (kBlock + 2) floats.
struct Source {
  const float* keys;  // [F, stride]
  const float* values;  // [len, F]
  int64_t stride, len;
};

void Attend(const Source& src, int64_t base, const float* q, int64_t rows, int64_t f_dim,
            const int64_t* seen, float* scores, float* m, float* sum, float* out) {
  for (int64_t j0 = 0; j0 < src.len; j0 += kBlock) {
    const int64_t len = std::min(kBlock, src.len - j0);
    Scores(q, rows, src.keys + j0, f_dim, src.stride, len, scores, kBlock);
    for (int64_t r = 0; r < rows; ++r) {
      float* s = scores + r * kBlock;
      const int64_t visible = std::clamp<int64_t>(seen[r] - base - j0, 0, len);
      if (visible == 0) {
        std::fill(s, s + len, 0.0f);
        continue;
      }
      const float top = std::max(m[r], Max(s, visible));
      if (top > m[r]) {
        const float scale = std::exp(m[r] - top);  // 0 on the first block (m = -inf)
        sum[r] *= scale;
        for (int64_t f = 0; f < f_dim; ++f) out[r * f_dim + f] *= scale;
        m[r] = top;
      }
      sum[r] += ExpSum(s, visible, top);
      std::fill(s + visible, s + len, 0.0f);
    }
    Mix(scores, kBlock, rows, src.values + j0 * f_dim, f_dim, len, out);
  }
}

void Unit(const Problem& pb, int64_t unit, float* scratch) {
  const int64_t tiles = (pb.t + pb.tile - 1) / pb.tile;
  const int64_t pair = unit / tiles, t_begin = (unit % tiles) * pb.tile;
  const int64_t t_end = std::min(pb.t, t_begin + pb.tile), rows = (t_end - t_begin) * pb.r;
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
  const int32_t* count = pb.count + n * pb.t;
  const int64_t first = (pair * pb.t + t_begin) * pb.r, offset = first * pb.f;
  const float* q = pb.q + offset;
  float* out = pb.out + offset;
  float* lse = pb.lse + first;
  float* scores = scratch;
  float* m = scratch + rows * kBlock;
  float* sum = m + rows;
  int64_t seen[kMaxTileRows], own = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = std::clamp<int64_t>(count[t_begin + r / pb.r], 0, pb.s);
    seen[r] = pre + c;
    own = std::max(own, c);
    m[r] = -INFINITY;
    sum[r] = 0.0f;
  }
  std::fill(out, out + rows * pb.f, 0.0f);
  const float* pkeys = pb.pk + (prompt * pb.kv + h) * pb.f * pb.p;
  const float* pvalues = pb.pv + (prompt * pb.kv + h) * pb.p * pb.f;
  Attend({pkeys, pvalues, pb.p, pre}, 0, q, rows, pb.f, seen, scores, m, sum, out);
  Attend({keys, values, pb.s, own}, pre, q, rows, pb.f, seen, scores, m, sum, out);
  for (int64_t r = 0; r < rows; ++r) {
    if (sum[r] > 0.0f) {
      const float inv = 1.0f / sum[r];
      for (int64_t f = 0; f < pb.f; ++f) out[r * pb.f + f] *= inv;
      lse[r] = m[r] + std::log(sum[r]);
    } else {  // nothing visible (e.g. a finished row's dropped token): zeros
      lse[r] = -1e30f;
    }
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
  pb.tile = std::max<int64_t>(1, std::min(pb.t, kMaxTileRows / std::max<int64_t>(pb.r, 1)));
  if (pb.r > kMaxTileRows)
    return ffi::Error::InvalidArgument("cache_attention: too many queries per KV head");
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
  ForEachUnit(pool, units, threads, pb.tile * pb.r * (kBlock + 2),
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

// The instruction set this library was compiled for (build.py's loaded_isa reads it back).
extern "C" const char* ArenaKernelIsa() { return arenarl::kIsa; }
