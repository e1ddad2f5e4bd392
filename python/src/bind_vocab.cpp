#include "bind.h"

void bind_vocab(nb::module_ &m) {}
