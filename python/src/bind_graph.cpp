#include "bind.h"

void bind_graph(nb::module_ &m) {}
