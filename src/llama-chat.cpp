#include "llama-chat.h"


namespace pinfer {

namespace {

bool has(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// jinja's `trim` / Python's str.strip() on ASCII whitespace.
std::string_view trim(std::string_view s) {
    const char * ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    const size_t e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

struct family_name {
    const char * name;
    chat_family family;
};

const family_name k_names[] = {
    {"chatml", chat_family::chatml},   {"llama2", chat_family::llama2},
    {"llama3", chat_family::llama3},   {"mistral", chat_family::mistral},
    {"phi3", chat_family::phi3},       {"gemma", chat_family::gemma},
    {"zephyr", chat_family::zephyr},   {"vicuna", chat_family::vicuna},
    {"vicuna-orca", chat_family::vicuna_orca}, {"falcon", chat_family::falcon},
};

// A chatml template may hard-code a default system turn, written as one jinja string
// literal '<|im_start|>system\n...<|im_end|>'. Returns its text (unescaped) if found.
// Occurrences that splice in message content (a quote before <|im_end|>) are skipped.
bool chatml_default_system(std::string_view tmpl, std::string & text) {
    const std::string_view head = "<|im_start|>system";
    for (size_t pos = tmpl.find(head); pos != std::string_view::npos; pos = tmpl.find(head, pos + 1)) {
        size_t i = pos + head.size();
        if (tmpl.compare(i, 2, "\\n") == 0) i += 2;          // escaped newline in the literal
        else if (i < tmpl.size() && tmpl[i] == '\n') i += 1;  // raw newline in the literal
        else continue;
        const size_t end = tmpl.find("<|im_end|>", i);
        if (end == std::string_view::npos) return false;
        std::string out;
        bool literal = true;
        for (size_t k = i; k < end; ++k) {
            const char c = tmpl[k];
            if (c == '\'' || c == '"') { literal = false; break; }
            if (c == '\\' && k + 1 < end) {
                const char n = tmpl[++k];
                out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
            } else {
                out += c;
            }
        }
        if (literal) {
            text = std::move(out);
            return true;
        }
    }
    return false;
}

// Families whose templates have strictly alternating user/assistant turns after an
// optional leading system message.
bool check_alternation(const std::vector<chat_message> & msgs, size_t first, const char * family,
                       std::string & error) {
    for (size_t i = first; i < msgs.size(); ++i) {
        const bool want_user = (i - first) % 2 == 0;
        const std::string & role = msgs[i].role;
        if (role != (want_user ? "user" : "assistant")) {
            error = std::string(family) + " chat template: message " + std::to_string(i) + " has role '" +
                    role + "' but roles must alternate user/assistant/user/... after an optional first "
                    "system message";
            return false;
        }
    }
    return true;
}

}  // namespace

const char * chat_family_name(chat_family f) {
    for (const auto & n : k_names) {
        if (n.family == f) return n.name;
    }
    return "unknown";
}

chat_family chat_detect(std::string_view t) {
    for (const auto & n : k_names) {
        if (t == n.name) return n.family;
    }
    if (has(t, "<|im_start|>")) return chat_family::chatml;
    if (has(t, "<|start_header_id|>")) return chat_family::llama3;
    if (has(t, "[INST]")) return has(t, "<<SYS>>") ? chat_family::llama2 : chat_family::mistral;
    if (has(t, "<start_of_turn>")) return chat_family::gemma;
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return chat_family::phi3;
    if (has(t, "<|user|>")) return chat_family::zephyr;
    if (has(t, "USER: ") && has(t, "SYSTEM: ")) return chat_family::vicuna_orca;
    if (has(t, "USER: ") && has(t, "ASSISTANT:")) return chat_family::vicuna;
    if (has(t, "Falcon:")) return chat_family::falcon;
    return chat_family::unknown;
}

bool chat_apply_template(std::string_view tmpl, const std::vector<chat_message> & msgs,
                         bool add_gen, std::string & result, std::string & error,
                         std::string_view bos, std::string_view eos) {
    if (tmpl.empty()) {
        error = "empty chat template";
        return false;
    }
    const chat_family fam = chat_detect(tmpl);
    if (fam == chat_family::unknown) {
        error = "unrecognised chat template: it contains none of the markers of the supported "
                "families (chatml <|im_start|>, llama3 <|start_header_id|>, llama2/mistral [INST], "
                "gemma <start_of_turn>, phi3 <|end|>, zephyr <|user|>, vicuna USER:/ASSISTANT:, "
                "falcon Falcon:)";
        return false;
    }
    // A bare family name stands for the family's canonical template, which uses the
    // special tokens; a template text uses them only if it mentions them.
    const bool is_name = tmpl == chat_family_name(fam);
    const bool use_bos = is_name || has(tmpl, "bos_token");
    const bool use_eos = is_name || has(tmpl, "eos_token");

    // Leading system message, for the families that take it apart from the turns.
    const bool has_sys = !msgs.empty() && msgs[0].role == "system";
    const size_t first = has_sys ? 1 : 0;

    std::string out;
    switch (fam) {
    case chat_family::chatml: {
        std::string def;
        if (!msgs.empty() && !has_sys && chatml_default_system(tmpl, def)) {
            out += "<|im_start|>system\n" + def + "<|im_end|>\n";
        }
        for (const auto & m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (add_gen) out += "<|im_start|>assistant\n";
        break;
    }
    case chat_family::llama2: {
        // Every user turn opens with BOS; the system prompt sits inside the first [INST].
        // The generation prompt is implicit: the text ends with [/INST].
        if (!check_alternation(msgs, first, "llama2", error)) return false;
        for (size_t i = first; i < msgs.size(); ++i) {
            std::string content = msgs[i].content;
            if (has_sys && i == first) content = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n" + content;
            if (msgs[i].role == "user") {
                if (use_bos) out += bos;
                out += "[INST] ";
                out += trim(content);
                out += " [/INST]";
            } else {
                out += " ";
                out += trim(content);
                out += " ";
                if (use_eos) out += eos;
            }
        }
        break;
    }
    case chat_family::mistral: {
        if (!check_alternation(msgs, first, "mistral", error)) return false;
        if (use_bos) out += bos;
        for (size_t i = first; i < msgs.size(); ++i) {
            if (msgs[i].role == "user") {
                out += "[INST] ";
                if (has_sys && i == first) out += msgs[0].content + "\n\n";
                out += msgs[i].content + " [/INST]";
            } else {
                out += msgs[i].content;
                if (use_eos) out += eos;
            }
        }
        break;
    }
    case chat_family::llama3: {
        for (size_t i = 0; i < msgs.size(); ++i) {
            if (i == 0 && use_bos) out += bos;
            out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n";
            out += trim(msgs[i].content);
            out += "<|eot_id|>";
        }
        if (add_gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
        break;
    }
    case chat_family::phi3: {
        if (use_bos) out += bos;
        for (const auto & m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
        if (add_gen) out += "<|assistant|>\n";
        else if (use_eos) out += eos;
        break;
    }
    case chat_family::gemma: {
        // Gemma has no system role; the system text leads the first user turn.
        if (!check_alternation(msgs, first, "gemma", error)) return false;
        if (use_bos) out += bos;
        for (size_t i = first; i < msgs.size(); ++i) {
            const std::string & role = msgs[i].role == "assistant" ? std::string("model") : msgs[i].role;
            out += "<start_of_turn>" + role + "\n";
            if (has_sys && i == first) out += msgs[0].content + "\n\n";
            out += trim(msgs[i].content);
            out += "<end_of_turn>\n";
        }
        if (add_gen) out += "<start_of_turn>model\n";
        break;
    }
    case chat_family::zephyr: {
        for (const auto & m : msgs) {
            out += "<|" + m.role + "|>\n" + m.content;
            if (use_eos) out += eos;
            out += "\n";
        }
        if (add_gen && !msgs.empty()) out += "<|assistant|>\n";
        break;
    }
    case chat_family::vicuna:
    case chat_family::vicuna_orca: {
        for (const auto & m : msgs) {
            if (m.role == "system") {
                if (fam == chat_family::vicuna_orca) out += "SYSTEM: " + m.content + "\n";
                else out += m.content + "\n\n";
            } else if (m.role == "user") {
                out += "USER: " + m.content + "\n";
            } else {
                out += "ASSISTANT: " + m.content + "</s>\n";
            }
        }
        if (add_gen) out += "ASSISTANT:";
        break;
    }
    case chat_family::falcon: {
        for (size_t i = 0; i < msgs.size(); ++i) {
            if (i > 0) out += "\n";
            const std::string & r = msgs[i].role;
            out += r == "system" ? "System: " : r == "user" ? "User: " : r == "assistant" ? "Falcon: " : "";
            out += msgs[i].content;
        }
        if (add_gen) out += "\nFalcon:";
        break;
    }
    case chat_family::unknown:
        break;
    }
    result = std::move(out);
    return true;
}

}  // namespace pinfer
