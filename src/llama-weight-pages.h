// Weights moved out of the file mapping into memory backed by 2 MiB pages
// (a buffer of the CPU's hugepage buffer type, ggml-backend.h).
//
// The sparse FFN operators read a few scattered rows per token; with the 4 KiB
// pages of a file mapping nearly every row is a TLB miss and a page walk,
// which costs them a third of their speed (BENCHMARKS.md, "Sparse FFN
// operators"). Transparent huge pages are only granted to anonymous memory
// (madvise mode), so the tensors the sparse operators read are copied into
// one anonymous mapping advised MADV_HUGEPAGE and pointed there. Where the
// kernel grants no huge pages the copy still works, with 4 KiB pages.
#pragma once

#include <cstddef>
#include <vector>

#include "ggml.h"

namespace pinfer {

class weight_pages {
public:
    weight_pages() = default;
    ~weight_pages();
    weight_pages(const weight_pages &) = delete;
    weight_pages &operator=(const weight_pages &) = delete;

    // Copies every tensor's bytes into one new mapping and points the tensor
    // there; throws std::runtime_error when the memory cannot be mapped.
    // The old bytes stay valid (readers that already hold the pointer keep
    // reading identical data).
    void adopt(const std::vector<ggml_tensor *> &tensors);
    // Or by hand: reserve() maps `bytes` (once) and returns the 2 MiB-aligned
    // start; fill it, then seal() makes it read-only. buffer(): what tensors
    // placed there name as their buffer.
    ggml_backend_buffer *buffer() const { return buf_; }
    char *reserve(size_t bytes);
    void seal();
    size_t bytes() const { return size_; }
    // Bytes of the mapping the kernel backs with huge pages (from
    // /proc/self/smaps; 0 where that is not readable).
    size_t huge_bytes() const;

private:
    ggml_backend_buffer *buf_ = nullptr;
    void *base_ = nullptr;
    size_t size_ = 0;
};

}  // namespace pinfer
