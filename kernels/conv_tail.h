// Where a short-convolution layer (LFM2) keeps its convolution tail in the
// paged KV pool. A convolution layer has no K or V; its per-block area of the
// pool (the K then the V allocation of that layer, each
// KvGeometry::layer_block_bytes() a block) holds instead a ring of `rows` F32
// rows of `channels` values: the B·x row of position p lives in block
// p / block_size at ring row p % rows. A block whose positions are all
// written thus holds the B·x rows of its last `rows` positions, and a block
// record (tiers, disk, remote) carries them with no machinery of its own: the
// convolution state is part of every block, exact at every tier.
//
// rows = l_cache (the kernel width L), one more than a convolution reads
// (L - 1 predecessors): the scheduler recomputes the last token of a wholly
// cached prompt in a private copy of its last block, and the extra row keeps
// that token's predecessors in the ring while its own row is rewritten.
//
// Host-only arithmetic (no CUDA types); tests/test_short_conv.cpp checks it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace prefixd::conv_tail {

// Ring rows of one block per convolution layer for kernel width `l_cache`.
inline int32_t ring_rows(int32_t l_cache) { return l_cache; }

// Bytes of one F32 ring row.
inline size_t row_bytes(int32_t channels) { return static_cast<size_t>(channels) * sizeof(float); }

// Ring rows that one side (K or V) of a block's layer area holds.
inline int32_t rows_per_side(const KvGeometry& g, int32_t channels) {
  return static_cast<int32_t>(g.layer_block_bytes() / row_bytes(channels));
}

// Whether a block's layer area (K and V sides together) holds the ring.
inline bool fits(const KvGeometry& g, int32_t channels, int32_t l_cache) {
  return channels > 0 && l_cache > 1 && 2 * rows_per_side(g, channels) >= ring_rows(l_cache);
}

// Address of ring row `row` of pool block `block` in layer `layer`: rows fill
// the block's K side first, then its V side. Unaligned (use memcpy).
inline uint8_t* row_ptr(const KvPool& pool, int32_t layer, int32_t block, int32_t row, int32_t channels) {
  const int32_t per_side = rows_per_side(pool.geom, channels);
  void* side = row < per_side ? pool.k[static_cast<size_t>(layer)] : pool.v[static_cast<size_t>(layer)];
  const int32_t r = row < per_side ? row : row - per_side;
  return static_cast<uint8_t*>(side) + static_cast<size_t>(block) * pool.geom.layer_block_bytes() +
         static_cast<size_t>(r) * row_bytes(channels);
}

// Address of the ring row of position `pos` of a sequence whose block table is `table`.
inline uint8_t* pos_ptr(const KvPool& pool, int32_t layer, const int32_t* table, int32_t pos, int32_t channels,
                        int32_t l_cache) {
  const int32_t bs = pool.geom.block_size;
  return row_ptr(pool, layer, table[pos / bs], pos % ring_rows(l_cache), channels);
}

}  // namespace prefixd::conv_tail
