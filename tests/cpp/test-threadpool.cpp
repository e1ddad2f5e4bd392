// ggml_threadpool_new when its threads cannot all be started: it returns NULL
// having stopped and joined the threads that did start, and the process can
// make pools afterwards. The failure is produced for real, in a child process
// whose address space (RLIMIT_AS) leaves room for a few dozen thread stacks.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ggml.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static long status_field(const char *name) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    const size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, n)) {
            v = atol(line + n);
            break;
        }
    fclose(f);
    return v;
}

static int child() {
    const long threads0 = status_field("Threads:");
    const long vm_kb = status_field("VmSize:");
    if (threads0 < 1 || vm_kb < 1) return 10;
    // room for about 40 default (8 MiB) stacks beyond what is mapped now
    const rlim_t lim = (rlim_t)vm_kb * 1024 + (rlim_t)320 * 1024 * 1024;
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 11;

    ggml_threadpool *tp = ggml_threadpool_new(100000);
    if (tp) {
        fprintf(stderr, "ggml_threadpool_new(100000) succeeded under RLIMIT_AS\n");
        return 1;
    }
    const long threads1 = status_field("Threads:");
    if (threads1 != threads0) {
        fprintf(stderr, "threads before %ld, after the failed pool %ld: threads were left running\n", threads0, threads1);
        return 2;
    }
    // later pools still work, and run a graph
    tp = ggml_threadpool_new(2);
    if (!tp) {
        fprintf(stderr, "a 2-thread pool failed after the failed one\n");
        return 3;
    }
    ggml_init_params ip = {1 << 20, nullptr, false};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 64);
    for (int i = 0; i < 64; i++) ((float *)a->data)[i] = (float)i;
    ggml_tensor *s = ggml_scale(ctx, a, 2.0f);
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, s);
    const int rc = ggml_graph_compute(g, tp);
    int bad = rc != 0;
    for (int i = 0; i < 64 && !bad; i++) bad = ((float *)s->data)[i] != 2.0f * i;
    ggml_free(ctx);
    ggml_threadpool_free(tp);
    if (bad) {
        fprintf(stderr, "the graph after the failed pool computed wrong values (rc %d)\n", rc);
        return 4;
    }
    return 0;
}

int main() {
#ifdef UNDER_ASAN
    // AddressSanitizer reserves terabytes of shadow memory: no RLIMIT_AS can be set.
    printf("test-threadpool: skipped under AddressSanitizer\n");
    return 77;
#else
    const pid_t pid = fork();
    if (pid < 0) return 20;
    if (pid == 0) _exit(child());
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 21;
    if (!WIFEXITED(st)) {
        fprintf(stderr, "the child died of signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
        return 1;
    }
    if (WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child failed with %d\n", WEXITSTATUS(st));
        return 1;
    }
    printf("test-threadpool: ok\n");
    return 0;
#endif
}
