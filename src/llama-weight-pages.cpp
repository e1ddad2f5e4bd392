#include "llama-weight-pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pinfer {

static constexpr size_t HUGE_PAGE = 2u << 20;
static constexpr size_t ALIGN = 64;

weight_pages::~weight_pages() {
    if (base_) munmap(base_, size_);
}

char *weight_pages::reserve(size_t total) {
    if (base_) throw std::logic_error("weight_pages: reserve() called twice");
    // One extra huge page so the start can be aligned to 2 MiB: the kernel
    // only maps a huge page over an aligned 2 MiB range.
    const size_t size = (total + 2 * HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        throw std::runtime_error("out of memory: cannot map " + std::to_string(size >> 20) + " MiB for the sparse FFN weights (" +
                                 strerror(errno) + ")");
    base_ = map;
    size_ = size;
    char *p = (char *)(((uintptr_t)map + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
#ifdef MADV_HUGEPAGE
    madvise(p, total, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
    return p;
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
