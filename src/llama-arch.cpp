#include "llama-arch.h"

namespace pinfer {

extern const arch_impl arch_falcon;
extern const arch_impl arch_opt;
const arch_impl *find_llama_like(const std::string &name);  // arch-llama.cpp
std::vector<std::string> llama_like_names();

const arch_impl *find_arch(const std::string &name) {
    if (name == arch_falcon.name) return &arch_falcon;
    if (name == arch_opt.name) return &arch_opt;
    return find_llama_like(name);
}

std::vector<std::string> supported_archs() {
    std::vector<std::string> out = llama_like_names();
    out.push_back(arch_falcon.name);
    out.push_back(arch_opt.name);
    return out;
}

const char *ffn_act_name(ffn_act a) {
    switch (a) {
        case ffn_act::SILU: return "silu";
        case ffn_act::GELU: return "gelu";
        case ffn_act::RELU: return "relu";
        case ffn_act::RELU_BOTH: return "relu-both";
    }
    return "?";
}

bool ffn_act_from_name(const std::string &name, ffn_act *out) {
    for (ffn_act a : {ffn_act::SILU, ffn_act::GELU, ffn_act::RELU, ffn_act::RELU_BOTH}) {
        if (name == ffn_act_name(a)) {
            *out = a;
            return true;
        }
    }
    return false;
}

}  // namespace pinfer
