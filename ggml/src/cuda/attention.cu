// Fused decode attention. The graph builds a head's attention as three nodes
// (src/llama-graph.cpp: build_attention):
//   kq = mul_mat(K, Q)                      K [hd, n_kv, n_head_kv], Q [hd, T, n_head]
//   p  = soft_max(kq * scale + mask)        [n_kv, T, n_head]
//   o  = mul_mat(V, p)                      V [n_kv, hd, n_head_kv] (the cache stores V transposed)
// For T <= MATVEC_MAX_T (decoding) the queue runs them as two launches over the
// F16 (or F32) cache, split over positions with an online softmax:
//   partial: a block per (chunk of positions, token, head) forms the scores,
//            their max m, Σ exp(s - m) and Σ exp(s - m) v, and writes kq;
//   merge:   a block per (token, head) rescales the chunks to the common max
//            in chunk order, writes o, and p from kq (so every node's result
//            is what the unfused path would leave: a later reader of kq or p,
//            if any, sees the same values).
// Every sum has a fixed order: the same result on every run.
#include "attention.cuh"
#include "reduce.cuh"

namespace pcuda {
namespace {

constexpr int CHUNK = 64;     // positions per partial block (a short context still fills the device)
constexpr int THREADS = 128;  // 4 warps
constexpr int MAX_HD = 256;

template <class E>
__device__ __forceinline__ float ld(const char *p) {
    if constexpr (sizeof(E) == 2) return __half2float(*(const __half *)p);
    else return *(const float *)p;
}

struct attn_args {
    view K, Q, V, mask, kq, p, o;
    bool has_mask;
    float scale;
    int n_chunks;
    float *part;  // [T * n_head][n_chunks][2 + hd]: m, l, acc
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <class E>
__global__ void partial_kernel(attn_args a) {
    __shared__ float q[MAX_HD];
    __shared__ float s[CHUNK];
    __shared__ float red[THREADS];
    const int chunk = blockIdx.x, t = blockIdx.y, h = blockIdx.z;
    const int hd = (int)a.K.ne[0], n_kv = (int)a.K.ne[1];
    const int hk = h / (int)(a.Q.ne[2] / a.K.ne[2]);  // the KV head of query head h (grouped-query attention)
    const int j0 = chunk * CHUNK, j1 = min(n_kv, j0 + CHUNK);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int d = threadIdx.x; d < hd; d += THREADS) q[d] = *(const float *)(a.Q.data + d * a.Q.nb[0] + t * a.Q.nb[1] + h * a.Q.nb[2]);
    __syncthreads();
    // scores: a warp per position, lanes over the head dimension
    for (int j = j0 + warp; j < j1; j += THREADS / 32) {
        const char *k = a.K.data + (int64_t)j * a.K.nb[1] + (int64_t)hk * a.K.nb[2];
        float d = 0.0f;
        for (int e = lane; e < hd; e += 32) d = fmaf(ld<E>(k + e * a.K.nb[0]), q[e], d);
        d = warp_sum(d);
        if (lane == 0) {
            *(float *)(a.kq.data + (int64_t)j * a.kq.nb[0] + t * a.kq.nb[1] + h * a.kq.nb[2]) = d;
            float v = __fmul_rn(d, a.scale);
            if (a.has_mask) v = __fadd_rn(v, *(const float *)(a.mask.data + (int64_t)j * a.mask.nb[0] + t * a.mask.nb[1]));
            s[j - j0] = v;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < j1 - j0; j += THREADS) mx = fmaxf(mx, s[j]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float l = 0.0f;
    for (int j = threadIdx.x; j < j1 - j0; j += THREADS) {
        const float e = mx == -INFINITY ? 0.0f : expf(s[j] - mx);
        s[j] = e;
        l += e;
    }
    red[threadIdx.x] = l;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    float *part = a.part + ((int64_t)(h * a.Q.ne[1] + t) * a.n_chunks + chunk) * (2 + hd);
    if (threadIdx.x == 0) {
        part[0] = mx;
        part[1] = red[0];
    }
    // Σ_j e_j v_j: a warp per output dimension d, lanes over positions (V's rows are contiguous in j)
    for (int d = warp; d < hd; d += THREADS / 32) {
        const char *v = a.V.data + (int64_t)d * a.V.nb[1] + (int64_t)hk * a.V.nb[2];
        float acc = 0.0f;
        for (int j = j0 + lane; j < j1; j += 32) acc = fmaf(s[j - j0], ld<E>(v + (int64_t)j * a.V.nb[0]), acc);
        acc = warp_sum(acc);
        if (lane == 0) part[2 + d] = acc;
    }
}

__global__ void merge_kernel(attn_args a) {
    const int t = blockIdx.x, h = blockIdx.y;
    const int hd = (int)a.K.ne[0], n_kv = (int)a.K.ne[1];
    const float *part = a.part + (int64_t)(h * a.Q.ne[1] + t) * a.n_chunks * (2 + hd);
    float M = -INFINITY;
    for (int c = 0; c < a.n_chunks; c++) M = fmaxf(M, part[(int64_t)c * (2 + hd)]);
    float L = 0.0f;
    for (int c = 0; c < a.n_chunks; c++) {
        const float m = part[(int64_t)c * (2 + hd)];
        if (m != -INFINITY) L += part[(int64_t)c * (2 + hd) + 1] * expf(m - M);
    }
    const float inv = M == -INFINITY ? 0.0f : 1.0f / L;  // a fully masked row: zeros, as soft_max gives
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < a.n_chunks; c++) {
            const float m = part[(int64_t)c * (2 + hd)];
            if (m != -INFINITY) acc += part[(int64_t)c * (2 + hd) + 2 + d] * expf(m - M);
        }
        *(float *)(a.o.data + d * a.o.nb[0] + t * a.o.nb[1] + h * a.o.nb[2]) = acc * inv;
    }
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) {
        float v = __fmul_rn(*(const float *)(a.kq.data + (int64_t)j * a.kq.nb[0] + t * a.kq.nb[1] + h * a.kq.nb[2]), a.scale);
        if (a.has_mask) v = __fadd_rn(v, *(const float *)(a.mask.data + (int64_t)j * a.mask.nb[0] + t * a.mask.nb[1]));
        *(float *)(a.p.data + (int64_t)j * a.p.nb[0] + t * a.p.nb[1] + h * a.p.nb[2]) = M == -INFINITY ? 0.0f : expf(v - M) * inv;
    }
}

bool kv_type(const ggml_tensor *t) { return t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_F32; }
bool flat(const ggml_tensor *t) { return t->ne[3] == 1; }

}  // namespace

int match_attention(ggml_tensor **nodes, int i, int n, attention_nodes *out) {
    ggml_tensor *kq = nodes[i];
    if (kq->op != GGML_OP_MUL_MAT || !kv_type(kq->src[0]) || kq->src[1]->type != GGML_TYPE_F32) return 0;
    const ggml_tensor *K = kq->src[0], *Q = kq->src[1];
    if (kq->ne[1] > MATVEC_MAX_T || K->ne[0] > MAX_HD || K->ne[2] < 1 || Q->ne[2] % K->ne[2] || !flat(K) || !flat(Q)) return 0;
    int j = i + 1;
    while (j < n && ggml_op_is_view(nodes[j]->op)) j++;
    if (j >= n) return 0;
    ggml_tensor *p = nodes[j];
    if (p->op != GGML_OP_SOFT_MAX || p->src[0] != kq || p->type != GGML_TYPE_F32 || !ggml_is_contiguous(p)) return 0;
    if (p->src[1] && p->src[1]->type != GGML_TYPE_F32) return 0;
    int k = j + 1;
    while (k < n && ggml_op_is_view(nodes[k]->op)) k++;
    if (k >= n) return 0;
    ggml_tensor *o = nodes[k];
    if (o->op != GGML_OP_MUL_MAT || o->src[1] != p || o->type != GGML_TYPE_F32 || o->src[0]->type != K->type) return 0;
    const ggml_tensor *V = o->src[0];
    if (V->ne[0] != K->ne[1] || V->ne[1] != K->ne[0] || V->ne[2] != K->ne[2] || !flat(V)) return 0;
    out->kq = kq;
    out->p = p;
    out->o = o;
    return k - i + 1;
}

size_t attention_scratch_bytes(const attention_nodes &a) {
    const int64_t hd = a.kq->src[0]->ne[0], n_kv = a.kq->src[0]->ne[1];
    const int64_t chunks = (n_kv + CHUNK - 1) / CHUNK;
    return (size_t)(a.kq->ne[1] * a.kq->ne[2] * chunks * (2 + hd)) * sizeof(float);
}

int op_attention(context &c, const attention_nodes &an) {
    const ggml_tensor *K = an.kq->src[0];
    attn_args a;
    a.K = view_of(K);
    a.Q = view_of(an.kq->src[1]);
    a.V = view_of(an.o->src[0]);
    a.has_mask = an.p->src[1] != nullptr;
    a.mask = view_of(a.has_mask ? an.p->src[1] : an.p);
    a.kq = view_of(an.kq);
    a.p = view_of(an.p);
    a.o = view_of(an.o);
    memcpy(&a.scale, &an.p->op_params[0], sizeof(float));
    const int64_t n_kv = K->ne[1], T = an.kq->ne[1], n_head = an.kq->ne[2];
    if (n_kv == 0 || T == 0 || n_head == 0) return 0;
    a.n_chunks = (int)((n_kv + CHUNK - 1) / CHUNK);
    a.part = (float *)scratch(c, attention_scratch_bytes(an));
    if (!a.part) return 1;
    const dim3 g1((unsigned)a.n_chunks, (unsigned)T, (unsigned)n_head), g2((unsigned)T, (unsigned)n_head);
    if (K->type == GGML_TYPE_F16) partial_kernel<__half><<<g1, THREADS, 0, c.compute>>>(a);
    else partial_kernel<float><<<g1, THREADS, 0, c.compute>>>(a);
    if (!launched("attention partial")) return 1;
    merge_kernel<<<g2, THREADS, 0, c.compute>>>(a);
    return launched("attention merge") ? 0 : 1;
}

}  // namespace pcuda
