// Shared pieces of the FFN builders (one file per sparse mode:
// llama-ffn-dense/exact/predictor/threshold.cpp; the probes they leave for
// statistics are read in llama-ffn-probes.cpp).
#pragma once

#include "ggml.h"
#include "llama-model.h"
#include "llama-sparse-ffn.h"

namespace pinfer {

// The neurons one device computes of a layer's FFN: [b, e) of the tensors
// in w, which hold neurons [0, rows) -- the host's whole FFN, or a device's
// compact copy of the hot prefix (rows = k). A whole layer is [0, n).
struct ffn_part {
    const layer_weights *w = nullptr;
    const ffn_bundle *bundle = nullptr;  // predictor mode's neuron bundle over the same neurons
    int64_t b = 0, e = 0;
    int64_t rows() const { return w->ffn_up->ne[1]; }
    bool whole() const { return b == 0 && e == rows(); }
};

// What every builder needs besides the part: the model, the layer, and the
// probes to fill (b and probe are null where nothing is recorded).
struct ffn_env {
    const model &m;
    int il;
    ffn_build *b;
    ffn_probe *probe;
    bool observe;
};

ggml_tensor *build_ffn_dense(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x);
ggml_tensor *build_ffn_exact(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x);
ggml_tensor *build_ffn_threshold(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x);
// The predicted active list of the layer over all n neurons (absolute ids),
// from the predictor in w (fc1, fc2), with the verify / observe probes.
ggml_tensor *build_ffn_predict(ggml_context *ctx, const ffn_env &env, const layer_weights &w, ggml_tensor *x);
// The FFN over the neurons of idx inside [p.b, p.e).
ggml_tensor *build_ffn_predictor(ggml_context *ctx, const ffn_env &env, const ffn_part &p, ggml_tensor *x, ggml_tensor *idx);

// ---- helpers ----
ggml_tensor *ffn_act_unary(ggml_context *ctx, ggml_tensor *a, ffn_act act);
ggml_tensor *ffn_act_gated(ggml_context *ctx, ggml_tensor *g, ggml_tensor *u, ffn_act act);
ggml_tensor *ffn_keep(ggml_tensor *t);  // an output the planner keeps (probes)
// Neurons [b, e) of a [d, rows] matrix (rows of gate, up, down_t) or of a
// [rows, d] one (columns of down; b and e on block boundaries).
ggml_tensor *ffn_rows(ggml_context *ctx, ggml_tensor *w, int64_t b, int64_t e);
ggml_tensor *ffn_cols(ggml_context *ctx, ggml_tensor *w, int64_t b, int64_t e);
// y + the up bias of the part's neurons (no bias: y): y [e-b, T] holds
// neurons [b, e) (local), or all of w's rows [rows, T] (a row-sparse
// product's output, whose rows are absolute within w).
ggml_tensor *ffn_up_bias(ggml_context *ctx, const ffn_part &p, ggml_tensor *y, bool local);
// The up bias of idx's active neurons in [b, e) and 0 on the other rows:
// F32 [rows, T] (the layout of ggml_mul_mat_sparse_rows on w's ffn_up), so an
// ungated activation of a row-sparse up stays 0 off the active set; nullptr
// without a bias.
ggml_tensor *ffn_up_bias_active(ggml_context *ctx, const ffn_part &p, ggml_tensor *x, ggml_tensor *idx);
// The down projection of h [e-b, T] (local neuron ids) over idx's neurons:
// column-sparse on down_t where the file has it, else dense.
ggml_tensor *ffn_down_local(ggml_context *ctx, const ffn_part &p, ggml_tensor *h, ggml_tensor *idx);

}  // namespace pinfer
