// Between the device file (cuda-backend.cu) and the queue (queue.cu).
#pragma once

#include "cuda-common.cuh"
#include "ggml-backend-cuda.h"

namespace pcuda {

// The backend's vtable; free_fn releases the context (cuda-backend.cu).
ggml_backend_i queue_iface(void (*free_fn)(ggml_backend *));

}  // namespace pcuda
