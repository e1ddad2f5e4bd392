#include "bind.h"

void bind_sampling(nb::module_ &m) {}
