#include "bind.h"

void bind_gguf(nb::module_ &m) {}
