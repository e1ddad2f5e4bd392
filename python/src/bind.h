// Each bind_*.cpp file exposes one area of the C/C++ API to Python.
#pragma once
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_types(nb::module_ &m);     // type traits, quantize/dequantize, dot kernels
void bind_gguf(nb::module_ &m);      // GGUF read/write
void bind_graph(nb::module_ &m);     // build and run single-op graphs (op tests)
void bind_vocab(nb::module_ &m);     // tokenizers
void bind_sampling(nb::module_ &m);  // Sampler (the chain), chat templates, stop strings
void bind_llama(nb::module_ &m);     // Model, Context over pinfer.h
