#include "llama-weight-pages.h"

#include "ggml-backend.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pinfer {

static constexpr size_t ALIGN = 64;

weight_pages::~weight_pages() { ggml_backend_buffer_free(buf_); }

char *weight_pages::reserve(size_t total) {
    if (buf_) throw std::logic_error("weight_pages: reserve() called twice");
    buf_ = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_hugepage_buffer_type(), total);
    if (!buf_)
        throw std::runtime_error("out of memory: cannot map " + std::to_string(total >> 20) + " MiB for the sparse FFN weights (" +
                                 ggml_backend_last_error() + ")");
    ggml_backend_buffer_set_usage(buf_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    base_ = ggml_backend_buffer_base(buf_);
    size_ = ggml_backend_buffer_size(buf_);
    return (char *)base_;
}

void weight_pages::seal() {
    if (base_) mprotect(base_, size_, PROT_READ);  // weights are read-only, as in the file mapping
}

void weight_pages::adopt(const std::vector<ggml_tensor *> &tensors) {
    size_t total = 0;
    for (const ggml_tensor *t : tensors) total += (ggml_nbytes(t) + ALIGN - 1) / ALIGN * ALIGN;
    if (total == 0) return;
    char *p = reserve(total);
    for (ggml_tensor *t : tensors) {
        const size_t n = ggml_nbytes(t);
        memcpy(p, t->data, n);
        t->data = p;
        t->buffer = buf_;
        p += (n + ALIGN - 1) / ALIGN * ALIGN;
    }
    seal();
}

size_t weight_pages::huge_bytes() const {
    if (!base_) return 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    bool inside = false;
    size_t kb = 0;
    const uintptr_t lo = (uintptr_t)base_, hi = lo + size_;
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < hi && b > lo;
            continue;
        }
        size_t v;
        if (inside && sscanf(line, "AnonHugePages: %zu kB", &v) == 1) kb += v;
    }
    fclose(f);
    return kb << 10;
}

}  // namespace pinfer
