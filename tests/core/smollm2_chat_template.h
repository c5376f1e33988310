#pragma once
// SmolLM2-135M-Instruct's chat template as its tokenizer_config.json holds it (ChatML with a default
// system message), for the suites that format chats without the model file.
#include <string>

namespace servelab::test {

inline const std::string kSmolLM2ChatTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' "
    "}}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% "
    "endfor "
    "%}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

}  // namespace servelab::test
