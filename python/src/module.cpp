#include "bind.h"

NB_MODULE(_core, m) {
    m.doc() = "pinfer native core";
    bind_types(m);
    bind_gguf(m);
    bind_graph(m);
    bind_vocab(m);
    bind_sampling(m);
    bind_llama(m);
}
