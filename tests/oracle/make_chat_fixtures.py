#!/usr/bin/env python3
"""Chat prompts rendered by transformers' own apply_chat_template (Jinja), for
tests/core/test_chat_template.cpp to compare ChatTemplate::format() with byte for byte. Run by CTest
as a fixture (also in SERVELAB_BASE_ONLY builds):

    .venv/bin/python tests/oracle/make_chat_fixtures.py --out build/base/chat_oracle/chat_cases.json

Templates: SmolLM2's, read from its GGUF (skipped, saying so, when the file is absent), and one or
more representative templates of each family written out below. Where a template is a model's
published one it is named; the strings were written from the published tokenizer_config.json files
and llama.cpp's tests/test-chat-template.cpp (which quotes several verbatim); the Gemma 3 one is a
text-only reduction of the published template. What matters for the test is that HF renders exactly
the string given here.
"""

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_GGUF = REPO / ".venv" / "share" / "servelab" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# name -> (expected family, expected variant, bos_token, eos_token, template)
TEMPLATES = {
    # teknium/OpenHermes-2.5-Mistral-7B: ChatML without a default system message.
    "chatml_openhermes": ("chatml", "chatml", "<s>", "<|im_end|>",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    # meta-llama/Llama-2-7b-chat-hf
    "llama2_chat": ("llama2", "llama2-chat", "<s>", "</s>",
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
    # mistralai/Mistral-7B-Instruct-v0.2's first template (no system role): llama.cpp files it under Llama 2.
    "llama2_inst_mistral_v02": ("llama2", "llama2-inst", "<s>", "</s>",
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"),
    # meta-llama/Meta-Llama-3-8B-Instruct
    "llama3_instruct": ("llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>",
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
        " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    # HuggingFaceH4/zephyr-7b-beta (newlines between the tags, as published)
    "zephyr_7b_beta": ("zephyr", "zephyr", "<s>", "</s>",
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
        "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
    # google/gemma-7b-it
    "gemma_7b_it": ("gemma", "gemma", "<bos>", "<eos>",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"),
    # Gemma 3's template reduced to text content: a system message prefixes the first user turn.
    "gemma3_text": ("gemma", "gemma3", "<bos>", "<eos>",
        "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
        "    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
        "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
        "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
        "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
        "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
        "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
        "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
        "    {{- message['content'] | trim -}}\n    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n"),
    # mistralai's 'v1' template (Mistral-7B-Instruct-v0.2 with a system prompt)
    "mistral_v1": ("mistral", "mistral-v1", "<s>", "</s>",
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
        "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n"
        "{{- bos_token }}\n{%- for message in loop_messages %}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{- raise_exception('After the optional system message, conversation roles must alternate "
        "user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
        "        {%- if loop.first and system_message is defined %}\n"
        "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
        "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
        "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
        "    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the exception "
        "of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n"),
    # mistralai/Mistral-Large-Instruct-2407 ('v3'), as quoted in llama.cpp's tests
    "mistral_v3": ("mistral", "mistral-v3", "<s>", "</s>", None),
    # mistralai/Mistral-Nemo-Instruct-2407 ('v3-tekken'), likewise
    "mistral_v3_tekken": ("mistral", "mistral-v3-tekken", "<s>", "</s>", None),
    # microsoft/Phi-3.5-mini-instruct: a system turn only when it has content; eos after the last turn
    # when no generation prompt is asked for.
    "phi3_5_mini": ("phi3", "phi3", "<s>", "<|endoftext|>",
        "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"),
    # microsoft/Phi-3-mini-4k-instruct (its template of mid-2024): the same with every system turn.
    "phi3_mini_4k": ("phi3", "phi3", "<s>", "<|endoftext|>",
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"),
    # mistralai/Mistral-Large-Instruct-2411 ('v7')
    "mistral_v7": ("mistral", "mistral-v7", "<s>", "</s>",
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
        "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}"
        "{{ ' ' + message['content'] + eos_token }}{% else %}"
        "{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %}"),
}


def mistral_v3_template(tekken):
    """The 'v3' and 'v3-tekken' templates differ in the spaces around [INST] and in the assistant turn."""
    inst = '"[INST]"' if tekken else '"[INST] "'
    tools_open = '"[AVAILABLE_TOOLS][" ' if tekken else '"[AVAILABLE_TOOLS] [" '
    assistant = 'message["content"] + eos_token' if tekken else '" " + message["content"]|trim + eos_token'
    results = "'[TOOL_RESULTS]{\"content\": '" if tekken else "'[TOOL_RESULTS] {\"content\": '"
    calls = '"[TOOL_CALLS][" ' if tekken else '"[TOOL_CALLS] [" '
    return (
        '{%- if messages[0]["role"] == "system" %}\n    {%- set system_message = messages[0]["content"] %}\n'
        '    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n'
        '{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n'
        '{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}\n\n'
        '{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}\n'
        '{%- set ns = namespace() %}\n{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n'
        '    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and '
        'message.tool_calls is not none)) %}\n'
        '        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}\n'
        '            {{- raise_exception("After the optional system message, conversation roles must alternate '
        'user/assistant/user/assistant/...") }}\n        {%- endif %}\n        {%- set ns.index = ns.index + 1 %}\n'
        '    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n'
        '    {%- if message["role"] == "user" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n'
        '            {{- ' + tools_open + '}}\n            {%- for tool in tools %}\n'
        '                {%- set tool = tool.function %}\n'
        '                {{- \'{"type": "function", "function": {\' }}\n'
        '                {%- for key, val in tool.items() if key != "return" %}\n'
        '                    {%- if val is string %}\n'
        '                        {{- \'"\' + key + \'": "\' + val + \'"\' }}\n'
        '                    {%- else %}\n                        {{- \'"\' + key + \'": \' + val|tojson }}\n'
        '                    {%- endif %}\n                    {%- if not loop.last %}\n'
        '                        {{- ", " }}\n                    {%- endif %}\n                {%- endfor %}\n'
        '                {{- "}}" }}\n                {%- if not loop.last %}\n                    {{- ", " }}\n'
        '                {%- else %}\n                    {{- "]" }}\n                {%- endif %}\n'
        '            {%- endfor %}\n            {{- "[/AVAILABLE_TOOLS]" }}\n            {%- endif %}\n'
        '        {%- if loop.last and system_message is defined %}\n'
        '            {{- ' + inst + ' + system_message + "\\n\\n" + message["content"] + "[/INST]" }}\n'
        '        {%- else %}\n            {{- ' + inst + ' + message["content"] + "[/INST]" }}\n        {%- endif %}\n'
        '    {%- elif message.tool_calls is defined and message.tool_calls is not none %}\n'
        '        {{- ' + calls + '}}\n        {%- for tool_call in message.tool_calls %}\n'
        '            {%- set out = tool_call.function|tojson %}\n            {{- out[:-1] }}\n'
        '            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n'
        '                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
        '            {%- endif %}\n            {{- \', "id": "\' + tool_call.id + \'"}\' }}\n'
        '            {%- if not loop.last %}\n                {{- ", " }}\n            {%- else %}\n'
        '                {{- "]" + eos_token }}\n            {%- endif %}\n        {%- endfor %}\n'
        '    {%- elif message["role"] == "assistant" %}\n        {{- ' + assistant + '}}\n'
        '    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}\n'
        '        {%- if message.content is defined and message.content.content is defined %}\n'
        '            {%- set content = message.content.content %}\n        {%- else %}\n'
        '            {%- set content = message.content %}\n        {%- endif %}\n'
        '        {{- ' + results + ' + content|string + ", " }}\n'
        '        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}\n'
        '            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
        '        {%- endif %}\n        {{- \'"call_id": "\' + message.tool_call_id + \'"}[/TOOL_RESULTS]\' }}\n'
        '    {%- else %}\n        {{- raise_exception("Only user and assistant roles are supported, with the exception '
        'of an initial optional system message!") }}\n    {%- endif %}\n{%- endfor %}\n'
    )


# Qwen/Qwen3-0.6B's published chat template (Apache-2.0, as llama.cpp's models/templates quotes it):
# reasoning blocks in the assistant's turns, tool responses, and the enable_thinking switch.
QWEN3_TEMPLATE = '{%- if tools %}\n    {{- \'<|im_start|>system\\n\' }}\n    {%- if messages[0].role == \'system\' %}\n        {{- messages[0].content + \'\\n\\n\' }}\n    {%- endif %}\n    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n    {%- for tool in tools %}\n        {{- "\\n" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n{%- else %}\n    {%- if messages[0].role == \'system\' %}\n        {{- \'<|im_start|>system\\n\' + messages[0].content + \'<|im_end|>\\n\' }}\n    {%- endif %}\n{%- endif %}\n{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith(\'<tool_response>\') and message.content.endswith(\'</tool_response>\')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for message in messages %}\n    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}\n        {{- \'<|im_start|>\' + message.role + \'\\n\' + message.content + \'<|im_end|>\' + \'\\n\' }}\n    {%- elif message.role == "assistant" %}\n        {%- set content = message.content %}\n        {%- set reasoning_content = \'\' %}\n        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n            {%- set reasoning_content = message.reasoning_content %}\n        {%- else %}\n            {%- if \'</think>\' in message.content %}\n                {%- set content = message.content.split(\'</think>\')[-1].lstrip(\'\\n\') %}\n                {%- set reasoning_content = message.content.split(\'</think>\')[0].rstrip(\'\\n\').split(\'<think>\')[-1].lstrip(\'\\n\') %}\n            {%- endif %}\n        {%- endif %}\n        {%- if loop.index0 > ns.last_query_index %}\n            {%- if loop.last or (not loop.last and reasoning_content) %}\n                {{- \'<|im_start|>\' + message.role + \'\\n<think>\\n\' + reasoning_content.strip(\'\\n\') + \'\\n</think>\\n\\n\' + content.lstrip(\'\\n\') }}\n            {%- else %}\n                {{- \'<|im_start|>\' + message.role + \'\\n\' + content }}\n            {%- endif %}\n        {%- else %}\n            {{- \'<|im_start|>\' + message.role + \'\\n\' + content }}\n        {%- endif %}\n        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n                {%- if (loop.first and content) or (not loop.first) %}\n                    {{- \'\\n\' }}\n                {%- endif %}\n                {%- if tool_call.function %}\n                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n                {{- \'<tool_call>\\n{"name": "\' }}\n                {{- tool_call.name }}\n                {{- \'", "arguments": \' }}\n                {%- if tool_call.arguments is string %}\n                    {{- tool_call.arguments }}\n                {%- else %}\n                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n                {{- \'}\\n</tool_call>\' }}\n            {%- endfor %}\n        {%- endif %}\n        {{- \'<|im_end|>\\n\' }}\n    {%- elif message.role == "tool" %}\n        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}\n            {{- \'<|im_start|>user\' }}\n        {%- endif %}\n        {{- \'\\n<tool_response>\\n\' }}\n        {{- message.content }}\n        {{- \'\\n</tool_response>\' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n            {{- \'<|im_end|>\\n\' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|im_start|>assistant\\n\' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- \'<think>\\n\\n</think>\\n\\n\' }}\n    {%- endif %}\n{%- endif %}'
TEMPLATES["qwen3"] = ("chatml", "qwen3", "", "<|im_end|>", QWEN3_TEMPLATE)

# Conversations only a template with reasoning blocks and tool turns is checked on.
QWEN3_CONVERSATIONS = {
    "reasoning_kept_after_the_last_question": [
        ("user", "Hi"), ("assistant", "<think>\nGreet back.\n</think>\n\nHello!"), ("user", "Again?"),
        ("assistant", "<think>\n\nsecond thought\n\n</think>\n\n\nSure.")],
    "reasoning_dropped_before_it": [
        ("user", "Hi"), ("assistant", "<think>old</think>Hello!"), ("user", "And now?")],
    "two_think_blocks": [("user", "q"), ("assistant", "<think>a</think>mid<think>b</think>\nend")],
    "tool_turns": [
        ("user", "Weather?"), ("assistant", "Let me look."), ("tool", "sunny"), ("tool", "22 C"),
        ("user", "<tool_response>\nx\n</tool_response>"), ("assistant", "<think>\nok\n</think>\nIt is sunny.")],
}
# Template variables a case sets, by template (vLLM's chat_template_kwargs).
TEMPLATE_KWARGS = {"qwen3": [{}, {"enable_thinking": False}, {"enable_thinking": True}]}

CONVERSATIONS = {
    "one_user": [("user", "Hello")],
    "system_user": [("system", "You are terse."), ("user", "Hi")],
    "user_assistant_user": [("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")],
    "system_user_assistant_user": [("system", "You are a helpful assistant"), ("user", "Hello"),
                                   ("assistant", "Hi there"), ("user", "Who are you")],
    "user_assistant": [("user", "2+2?"), ("assistant", "4")],
    "whitespace": [("system", "  sys \n"), ("user", "\x1c  Hi\u3000 \u2028"), ("assistant", "   I am an assistant   "),
                   ("user", "\t?\n\u0085")],
    "empty_system": [("system", ""), ("user", "Hi")],
    "empty_content": [("user", ""), ("assistant", ""), ("user", " ")],
    "unicode": [("user", "日本語 🐍 <b>&amp; \"quotes\" 'single'")],
    "assistant_first": [("assistant", "x"), ("user", "y")],
    "two_users": [("user", "a"), ("user", "b")],
    "other_role": [("user", "a"), ("critic", "b")],
    "system_only": [("system", "s")],
    "system_twice": [("system", "s1"), ("system", "s2"), ("user", "u")],
}


def render(tok, template, conversation, add_generation_prompt, bos, eos, kwargs=None):
    messages = [{"role": r, "content": c} for r, c in conversation]
    try:
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                       add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos,
                                       **(kwargs or {}))
        return {"text": text}
    except Exception as e:  # the template's raise_exception (jinja2 TemplateError) or a Jinja error
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    args = ap.parse_args()

    import transformers
    from tokenizers import Tokenizer, models

    templates = dict(TEMPLATES)
    templates["mistral_v3"] = templates["mistral_v3"][:4] + (mistral_v3_template(False),)
    templates["mistral_v3_tekken"] = templates["mistral_v3_tekken"][:4] + (mistral_v3_template(True),)

    plain = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    entries = []
    result = {"transformers_version": transformers.__version__}
    if args.gguf.is_file():
        smol = transformers.AutoTokenizer.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name)
        entries.append(("smollm2", "chatml", "chatml", smol.bos_token, smol.eos_token, smol.chat_template, smol))
        result["smollm2_default_system"] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    else:
        result["smollm2_skip"] = f"{args.gguf} not found (scripts/bootstrap puts SmolLM2's GGUF there)"
        print(f"note: {result['smollm2_skip']}; SmolLM2's template is not checked", file=sys.stderr)
    for name, (family, variant, bos, eos, template) in templates.items():
        entries.append((name, family, variant, bos, eos, template, plain))

    out = []
    for name, family, variant, bos, eos, template, tok in entries:
        cases = []
        conversations = dict(CONVERSATIONS, **(QWEN3_CONVERSATIONS if name == "qwen3" else {}))
        for conv_name, conversation in conversations.items():
            for agp in (True, False):
                for kwargs in TEMPLATE_KWARGS.get(name, [{}]):
                    case = {"conversation": conv_name, "messages": [list(m) for m in conversation],
                            "add_generation_prompt": agp, **kwargs}
                    case.update(render(tok, template, conversation, agp, bos, eos, kwargs))
                    cases.append(case)
        out.append({"name": name, "family": family, "variant": variant, "bos_token": bos, "eos_token": eos,
                    "template": template, "cases": cases})
    result["templates"] = out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=True, indent=1), encoding="ascii")
    n = sum(len(t["cases"]) for t in out)
    errors = sum(1 for t in out for c in t["cases"] if "error" in c)
    print(f"wrote {args.out}: {len(out)} templates, {n} renderings ({errors} raise)", file=sys.stderr)


if __name__ == "__main__":
    main()
