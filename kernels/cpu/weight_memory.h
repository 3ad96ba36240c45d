// Host memory for the weight matrices (CpuMatrix's panels and rows), in
// transparent huge pages. A decode step streams every weight once; through
// 4 KiB pages that is a TLB miss and a page walk every 4 KiB, and a model's
// hundreds of matrices of a few MiB each would mostly miss the 2 MiB pages if
// each were its own allocation. So matrices are carved one after another
// from 64 MiB chunks that start on a 2 MiB boundary and are advised as huge
// pages before the first touch (MADV_HUGEPAGE: advice; on a kernel that
// refuses it nothing changes). A chunk goes back when the last matrix in it is
// freed (the one new blocks are carved from stays, empty, for the next model).
// Only weights come from here: they live as long as their model, so a chunk
// is not held by one short-lived block. Blocks under 64 KiB are plain
// aligned allocations.
#pragma once

#include <cstddef>

namespace prefixd::cpu {

// n_bytes, 64-byte aligned, uninitialised; aborts on OOM. Sets *rounded to the
// bytes the caller may touch (n_bytes rounded up to 64). Free with free_weights.
void* alloc_weights_raw(size_t n_bytes, size_t* rounded);

// As alloc_weights_raw, zeroed.
void* alloc_weights(size_t n_bytes);

// Frees a block of alloc_weights(_raw), or one of alloc_aligned (a CpuMatrix
// filled by hand); nullptr does nothing.
void free_weights(void* p);

// Chunks held now (the tests' view of when chunks go back).
size_t weight_chunks();

}  // namespace prefixd::cpu
