// Loading the neuron-aware parts of an extended GGUF file (docs/extended-gguf.md)
// and of PowerInfer's files: predictors, transposed down projections, neuron
// frequencies, thresholds and the placement section, with shape checks that
// name the offending tensor or key. No graph changes: this only fills
// layer_weights' optional tensors and model::sparse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llama-hparams.h"

namespace pinfer {

class model_loader;
struct model;

// Before the architecture loads its tensors: a PowerInfer file stores only
// blk.N.ffn_down_t (no ffn_down); rebuild ffn_down from it in memory so the
// dense graph runs unchanged.
void prepare_sparse_tensors(model_loader &ml, const hparams &hp);

// After the architecture's tensors: fills the optional layer tensors and
// m.sparse, appends a summary to m.desc. Throws naming the tensor/key.
void load_sparse_meta(model_loader &ml, model &m);

// Reads a PowerInfer .gpuidx file (blk.N.gpu_idx, blk.N.gpu_bucket) into
// m.sparse.gpu_neurons; when every layer's set is a prefix [0, k) it is also
// added as a placement entry (solver "powerinfer-gpuidx"). Throws naming the problem.
void load_gpuidx(model &m, const std::string &path);

}  // namespace pinfer
