#include "bind.h"

void bind_types(nb::module_ &m) {}
