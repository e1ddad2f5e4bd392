#include "llama-threads.h"

#include <sched.h>

#include <cstdio>
#include <thread>

namespace pinfer {

int n_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const unsigned hc = std::thread::hardware_concurrency();
    return hc ? (int)hc : 1;
}

int pick_n_threads(int requested, const char *who) {
    const int cores = n_cores();
    if (requested <= 0) return cores;
    if (requested > cores) {
        fprintf(stderr, "%s: %d threads requested, but only %d core%s available: using %d\n", who, requested, cores,
                cores == 1 ? " is" : "s are", cores);
        return cores;
    }
    return requested;
}

}  // namespace pinfer
