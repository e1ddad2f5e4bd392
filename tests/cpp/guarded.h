// Test data placed so that its last byte is followed by an unreadable page: a
// kernel that reads past the end of its input faults, and the test fails.
#pragma once
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

struct guarded {
    void *map = nullptr;
    size_t len = 0;
    void *data = nullptr;  // the copy, ending at the unreadable page
    guarded(const void *src, size_t bytes) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (bytes + page - 1) / page * page;
        len = body + page;
        map = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
            perror("mmap");
            map = nullptr;
            return;
        }
        mprotect((char *)map + body, page, PROT_NONE);
        data = (char *)map + body - bytes;
        memcpy(data, src, bytes);
    }
    template <class T>
    explicit guarded(const std::vector<T> &v) : guarded(v.data(), v.size() * sizeof(T)) {}
    guarded(const guarded &) = delete;
    guarded &operator=(const guarded &) = delete;
    ~guarded() {
        if (map) munmap(map, len);
    }
};
