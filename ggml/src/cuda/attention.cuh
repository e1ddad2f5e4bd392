// The fused decode attention (attention.cu): the queue recognises the three
// nodes of a head's attention and runs them as one op.
#pragma once

#include "ops.cuh"

namespace pcuda {

struct attention_nodes {
    ggml_tensor *kq, *p, *o;  // mul_mat(K, Q), soft_max(kq, mask), mul_mat(V, p)
};

// The number of nodes from nodes[i] (views included) that form a fusable
// attention, filling *out; 0 when they do not.
int match_attention(ggml_tensor **nodes, int i, int n, attention_nodes *out);
size_t attention_scratch_bytes(const attention_nodes &a);
int op_attention(context &c, const attention_nodes &a);

}  // namespace pcuda
