// Chat templates without a jinja engine: recognise the template family from substrings
// characteristic of the GGUF `tokenizer.chat_template` text (or from a family name such
// as "chatml"), then format the messages the way that family's template does.
//
// Formatting follows the widely published template of each family, rendered as Hugging
// Face does (trim_blocks, lstrip_blocks), with bos_token / eos_token substituted where the
// template uses them. Where a family's template has no system role (mistral, gemma), the
// system message is put in front of the first user message, separated by a blank line,
// rather than failing. A chatml template that hard-codes a default system prompt for
// conversations without one (SmolLM2, Qwen2) gets that prompt too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pinfer {

struct chat_message {
    std::string role;     // "system", "user", "assistant"
    std::string content;
};

enum class chat_family {
    unknown,
    chatml,
    llama2,
    llama3,
    mistral,
    phi3,
    gemma,
    zephyr,
    vicuna,       // "USER: " / "ASSISTANT: ", system text as a bare preamble
    vicuna_orca,  // same with "SYSTEM: "
    falcon,
};

const char * chat_family_name(chat_family f);

// The family of a template text, or of a bare family name ("chatml", "llama3", ...).
chat_family chat_detect(std::string_view tmpl);

// Formats messages with the template's family. Returns false and sets error (naming the
// problem: unknown template, bad role order, ...) when it cannot; out is then unchanged.
bool chat_apply_template(std::string_view tmpl, const std::vector<chat_message> & messages,
                         bool add_generation_prompt, std::string & out, std::string & error,
                         std::string_view bos_token = "", std::string_view eos_token = "");

}  // namespace pinfer
