#include "llama-arch.h"

namespace pinfer {

extern const arch_impl arch_llama;
extern const arch_impl arch_qwen2;
extern const arch_impl arch_falcon;

static const arch_impl *const k_archs[] = {&arch_llama, &arch_qwen2, &arch_falcon};

const arch_impl *find_arch(const std::string &name) {
    for (const arch_impl *a : k_archs)
        if (name == a->name) return a;
    return nullptr;
}

std::vector<std::string> supported_archs() {
    std::vector<std::string> out;
    for (const arch_impl *a : k_archs) out.push_back(a->name);
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
