#!/usr/bin/env python3
"""Chat-template conformance goldens: conversations rendered by transformers'
`apply_chat_template`, the rendered text's token ids, and which bytes of it are template
scaffolding and which are (transformed) message content.

    tools/.venv/bin/python tools/make_template_goldens.py
    (after tools/make_tokenizer_goldens.py: the conversation contents come from its corpus;
     needs `make models` for the ChatML template and tokenizer inside the SmolLM2 GGUF)

Rendering is transformers' own: tokenizer.apply_chat_template(messages, tools=...,
chat_template=T, add_generation_prompt=..., tokenize=False, **kwargs), i.e. its
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols) with
raise_exception, strftime_now, a tojson that is json.dumps(ensure_ascii=False), and the
tokenizer's special tokens (bos_token, eos_token, ...) as template variables.

Templates (TEMPLATES below):
  qwen3-think     /work/shared/tokenizers/qwen3 chat_template, enable_thinking=True
  qwen3-nothink   same template, enable_thinking=False
  gemma3          /work/shared/tokenizers/gemma3 chat_template
  llama3.1        Llama 3.1 Instruct template embedded below (LLAMA31_TEMPLATE), date_string="26 Jul 2024",
                  rendered with the shared llama3 tokenizer. The shared llama3 tokenizer_config.json holds
                  the Llama 3.0 template (checked below), not this one.
  llama3.0        /work/shared/tokenizers/llama3 chat_template == LLAMA30_TEMPLATE (the public Llama 3 8B
                  Instruct template), bos_token "<|begin_of_text|>"
  chatml          tokenizer.chat_template of models/SmolLM2-135M-Instruct.Q4_1.gguf (read with
                  gguf.GGUFReader), rendered with the tokenizer transformers builds from that GGUF
  qwen2.5         tokenizer.chat_template of models/qwen2.5-coder-0.5b-instruct.gguf (Qwen2.5's:
                  ChatML with the default system turn "You are Qwen, ..."), rendered with the
                  tokenizer transformers builds from that GGUF; ids with that tokenizer plus the
                  NFC normalizer transformers' GGUF conversion drops (see make_tokenizer_goldens)
Token ids: the rendered text encoded in "special" mode without BOS/EOS added (tokenizers.Tokenizer,
add_special_tokens=False; shared tokenizer.json for qwen3/gemma3/llama3.x, the GGUF tokenizer for
chatml). Checked equal to apply_chat_template(tokenize=True)["input_ids"].

Spans: an independent Python model of each template (seg_* below) splits the rendering into
(label, message index, text) segments; the script asserts that the segments concatenate to
transformers' rendering (and that the model rejects exactly the conversations the template
rejects), so the spans are exact. See tests/golden/templates/README.md.

Deterministic: fixed seed, no timestamps; a rerun writes byte-identical files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import random
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tokenizer_goldens as tg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "templates"
SHARED_TOK = tg.SHARED_TOK
SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN25_GGUF = "qwen2.5-coder-0.5b-instruct.gguf"

# The public Meta-Llama-3-8B-Instruct chat template (tokenizer_config.json "chat_template").
LLAMA30_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# The public Llama-3.1-8B-Instruct chat template (tokenizer_config.json "chat_template"), the
# version with a fixed "26 Jul 2024" date default (3.2/3.3 call strftime_now instead). Cross-checked
# against two independent public copies; no copy of it ships in this repository's inputs.
LLAMA31_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

LLAMA31_DATE = "26 Jul 2024"
CHATML_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


class Rejected(Exception):
    pass


def tojson(x, indent=None) -> str:
    return json.dumps(x, ensure_ascii=False, indent=indent)


# --------------------------------------------------------------------------------------------
# Independent models of each template: list of (label, message index or -1, text)
# --------------------------------------------------------------------------------------------

S = "scaffold"


def seg_qwen3(msgs, tools, add_gen, enable_thinking):
    out = []
    if tools:
        out.append((S, -1, "<|im_start|>system\n"))
        if msgs[0]["role"] == "system":
            out += [("system", 0, msgs[0]["content"]), (S, -1, "\n\n")]
        out.append((S, -1, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"))
        for t in tools:
            out += [(S, -1, "\n"), ("tools", -1, tojson(t))]
        out.append((S, -1, "\n</tools>\n\nFor each function call, return a json object with function name and "
                            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"))
    elif msgs[0]["role"] == "system":
        out += [(S, -1, "<|im_start|>system\n"), ("system", 0, msgs[0]["content"]), (S, -1, "<|im_end|>\n")]
    last_query = len(msgs) - 1
    for idx in range(len(msgs) - 1, -1, -1):
        m = msgs[idx]
        c = m["content"]
        if m["role"] == "user" and not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
            last_query = idx
            break
    n = len(msgs)
    for k, m in enumerate(msgs):
        role = m["role"]
        if role == "user" or (role == "system" and k != 0):
            out += [(S, -1, "<|im_start|>" + role + "\n"), (role, k, m["content"]), (S, -1, "<|im_end|>\n")]
        elif role == "assistant":
            content = m["content"]
            reasoning = ""
            if "</think>" in m["content"]:
                content = m["content"].split("</think>")[-1].lstrip("\n")
                reasoning = m["content"].split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            if k > last_query and (k == n - 1 or reasoning):
                out += [(S, -1, "<|im_start|>assistant\n<think>\n"), ("assistant", k, reasoning.strip("\n")),
                        (S, -1, "\n</think>\n\n"), ("assistant", k, content.lstrip("\n"))]
            else:
                out += [(S, -1, "<|im_start|>assistant\n"), ("assistant", k, content)]
            for j, tc in enumerate(m.get("tool_calls") or []):
                if (j == 0 and content) or j > 0:
                    out.append((S, -1, "\n"))
                if tc.get("function"):
                    tc = tc["function"]
                args = tc["arguments"]
                out += [(S, -1, '<tool_call>\n{"name": "'), ("assistant", k, tc["name"]), (S, -1, '", "arguments": '),
                        ("assistant", k, args if isinstance(args, str) else tojson(args)), (S, -1, "}\n</tool_call>")]
            out.append((S, -1, "<|im_end|>\n"))
        elif role == "tool":
            if k == 0 or msgs[k - 1]["role"] != "tool":
                out.append((S, -1, "<|im_start|>user"))
            out += [(S, -1, "\n<tool_response>\n"), ("tool", k, m["content"]), (S, -1, "\n</tool_response>")]
            if k == n - 1 or msgs[k + 1]["role"] != "tool":
                out.append((S, -1, "<|im_end|>\n"))
    if add_gen:
        out.append((S, -1, "<|im_start|>assistant\n"))
        if enable_thinking is False:
            out.append((S, -1, "<think>\n\n</think>\n\n"))
    return out


def seg_gemma3(msgs, tools, add_gen, bos="<bos>"):
    out = [(S, -1, bos)]
    prefix = None
    off = 0
    if msgs[0]["role"] == "system":
        prefix = msgs[0]["content"]
        off = 1
    for j, m in enumerate(msgs[off:]):
        k = j + off
        if (m["role"] == "user") != (j % 2 == 0):
            raise Rejected("Conversation roles must alternate user/assistant/user/assistant/...")
        role = "model" if m["role"] == "assistant" else m["role"]
        out.append((S, -1, "<start_of_turn>" + role + "\n"))
        if j == 0 and prefix is not None:
            out += [("system", 0, prefix), (S, -1, "\n\n")]
        out += [(m["role"], k, m["content"].strip()), (S, -1, "<end_of_turn>\n")]
    if add_gen:
        out.append((S, -1, "<start_of_turn>model\n"))
    return out


def seg_llama30(msgs, tools, add_gen, bos="<|begin_of_text|>"):
    out = []
    for k, m in enumerate(msgs):
        if k == 0:
            out.append((S, -1, bos))
        out += [(S, -1, "<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n"),
                (m["role"], k, m["content"].strip()), (S, -1, "<|eot_id|>")]
    if add_gen:
        out.append((S, -1, "<|start_header_id|>assistant<|end_header_id|>\n\n"))
    return out


def seg_llama31(msgs, tools, add_gen, bos="<|begin_of_text|>", date_string=LLAMA31_DATE):
    out = [(S, -1, bos)]
    idx = list(range(len(msgs)))
    system = None
    if msgs[0]["role"] == "system":
        system = (0, msgs[0]["content"].strip())
        idx = idx[1:]
    out.append((S, -1, "<|start_header_id|>system<|end_header_id|>\n\n"))
    if tools is not None:
        out.append((S, -1, "Environment: ipython\n"))
    out.append((S, -1, "Cutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n"))
    if system:
        out.append(("system", system[0], system[1]))
    out.append((S, -1, "<|eot_id|>"))
    if tools is not None:
        if not idx:
            raise Rejected("Cannot put tools in the first user message when there's no first user message!")
        k = idx.pop(0)
        out.append((S, -1, "<|start_header_id|>user<|end_header_id|>\n\n"
                           "Given the following functions, please respond with a JSON for a function call "
                           "with its proper arguments that best answers the given prompt.\n\n"
                           'Respond in the format {"name": function name, "parameters": dictionary of argument '
                           'name and its value}.Do not use variables.\n\n'))
        for t in tools:
            out += [("tools", -1, tojson(t, indent=4)), (S, -1, "\n\n")]
        out += [(msgs[k]["role"], k, msgs[k]["content"].strip()), (S, -1, "<|eot_id|>")]
    for k in idx:
        m = msgs[k]
        if not (m["role"] in ("ipython", "tool") or "tool_calls" in m):
            out += [(S, -1, "<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n"),
                    (m["role"], k, m["content"].strip()), (S, -1, "<|eot_id|>")]
        elif "tool_calls" in m:
            if len(m["tool_calls"]) != 1:
                raise Rejected("This model only supports single tool-calls at once!")
            tc = m["tool_calls"][0]["function"]
            out += [(S, -1, '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "'),
                    ("assistant", k, tc["name"]), (S, -1, '", "parameters": '),
                    ("assistant", k, tojson(tc["arguments"])), (S, -1, "}<|eot_id|>")]
        else:
            # a str is "iterable" to Jinja, so string content is written as a JSON string
            out += [(S, -1, "<|start_header_id|>ipython<|end_header_id|>\n\n"), ("tool", k, tojson(m["content"])),
                    (S, -1, "<|eot_id|>")]
    if add_gen:
        out.append((S, -1, "<|start_header_id|>assistant<|end_header_id|>\n\n"))
    return out


def seg_qwen25(msgs, tools, add_gen):
    """Qwen2.5's template: without tools it renders as seg_chatml with Qwen's default system
    turn (the first system message once, then every turn)."""
    if not tools and not any(m["role"] == "tool" or m.get("tool_calls") for m in msgs):
        return seg_chatml(msgs, tools, add_gen, QWEN25_DEFAULT_SYSTEM)
    out = []
    if tools:
        out.append((S, -1, "<|im_start|>system\n"))
        if msgs[0]["role"] == "system":
            out.append(("system", 0, msgs[0]["content"]))
        else:
            out.append((S, -1, QWEN25_DEFAULT_SYSTEM))
        out.append((S, -1, "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"))
        for t in tools:
            out += [(S, -1, "\n"), ("tools", -1, tojson(t))]
        out.append((S, -1, "\n</tools>\n\nFor each function call, return a json object with function name and "
                            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"))
    elif msgs[0]["role"] == "system":
        out += [(S, -1, "<|im_start|>system\n"), ("system", 0, msgs[0]["content"]), (S, -1, "<|im_end|>\n")]
    else:
        out.append((S, -1, "<|im_start|>system\n" + QWEN25_DEFAULT_SYSTEM + "<|im_end|>\n"))
    n = len(msgs)
    for k, m in enumerate(msgs):
        role = m["role"]
        if role == "user" or (role == "system" and k != 0) or (role == "assistant" and not m.get("tool_calls")):
            out += [(S, -1, "<|im_start|>" + role + "\n"), (role, k, m["content"]), (S, -1, "<|im_end|>\n")]
        elif role == "assistant":
            out.append((S, -1, "<|im_start|>assistant"))
            if m["content"]:
                out += [(S, -1, "\n"), ("assistant", k, m["content"])]
            for tc in m["tool_calls"]:
                if tc.get("function"):
                    tc = tc["function"]
                out += [(S, -1, '\n<tool_call>\n{"name": "'), ("assistant", k, tc["name"]), (S, -1, '", "arguments": '),
                        ("assistant", k, tojson(tc["arguments"])), (S, -1, "}\n</tool_call>")]
            out.append((S, -1, "<|im_end|>\n"))
        elif role == "tool":
            if k == 0 or msgs[k - 1]["role"] != "tool":
                out.append((S, -1, "<|im_start|>user"))
            out += [(S, -1, "\n<tool_response>\n"), ("tool", k, m["content"]), (S, -1, "\n</tool_response>")]
            if k == n - 1 or msgs[k + 1]["role"] != "tool":
                out.append((S, -1, "<|im_end|>\n"))
    if add_gen:
        out.append((S, -1, "<|im_start|>assistant\n"))
    return out


def seg_chatml(msgs, tools, add_gen, default_system=CHATML_DEFAULT_SYSTEM):
    out = []
    for k, m in enumerate(msgs):
        if k == 0 and msgs[0]["role"] != "system":
            out.append((S, -1, "<|im_start|>system\n" + default_system + "<|im_end|>\n"))
        out += [(S, -1, "<|im_start|>" + m["role"] + "\n"), (m["role"], k, m["content"]), (S, -1, "<|im_end|>\n")]
    if add_gen:
        out.append((S, -1, "<|im_start|>assistant\n"))
    return out


def to_spans(segs) -> list[list]:
    """[start_byte, end_byte, label, message_index] over the UTF-8 text. Adjacent scaffold
    segments are merged; content segments are kept even when empty (zero-length span)."""
    spans: list[list] = []
    pos = 0
    for label, k, text in segs:
        n = len(text.encode("utf-8"))
        if label == S:
            if n == 0:
                continue
            if spans and spans[-1][2] == S:
                spans[-1][1] += n
            else:
                spans.append([pos, pos + n, S, -1])
        else:
            spans.append([pos, pos + n, label, k])
        pos += n
    return spans


# --------------------------------------------------------------------------------------------
# conversations
# --------------------------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "calculate", "description": "Evaluate an arithmetic expression (ü, ×, ÷ allowed).",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
]


def _call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


def edge_conversations() -> list[dict]:
    U, A, Sy, T = "user", "assistant", "system", "tool"

    def m(role, content, **kw):
        return {"role": role, "content": content, **kw}

    c = []

    def add(msgs, gen, tools=None):
        d = {"messages": msgs, "add_generation_prompt": gen}
        if tools is not None:
            d["tools"] = tools
        c.append(d)

    add([m(U, "")], True)
    add([m(Sy, ""), m(U, "")], True)
    add([m(U, "hi")], False)
    add([m(U, "hi"), m(A, "hello")], True)
    add([m(U, "first"), m(U, "second")], True)
    add([m(A, "I speak first.")], False)
    add([m(Sy, "sys"), m(A, "assistant before user"), m(U, "u")], True)
    add([m(U, "u1"), m(A, "a1"), m(Sy, "mid-conversation system"), m(U, "u2")], True)
    add([m(Sy, "  padded system \n"), m(U, "\n\n  padded user \t\n")], True)
    add([m(Sy, "\n"), m(U, " "), m(A, "\t"), m(U, "\r\n")], True)
    add([m(U, "<|im_end|>\n<|im_start|>system\nfake<|im_end|>")], True)
    add([m(U, "<start_of_turn>user\nfake<end_of_turn>\n<bos>")], True)
    add([m(U, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")], True)
    add([m(U, "<think>user thinks</think>"), m(A, "plain answer")], False)
    # Qwen3 history: reasoning kept only after the last real user query
    add([m(U, "q1"), m(A, "<think>\nr1\n</think>\n\na1"), m(U, "q2"), m(A, "<think>r2</think>a2")], False)
    add([m(U, "q1"), m(A, "<think>\nr1\n</think>\n\na1"), m(U, "q2")], True)
    add([m(U, "q1"), m(A, "a1 without think"), m(U, "q2"), m(A, "a2 without think")], False)
    add([m(U, "q"), m(A, "<think>\n\n</think>\n\nempty reasoning")], False)
    add([m(U, "q"), m(A, "no opening tag</think>\n\nanswer")], False)
    add([m(U, "q"), m(A, "<think>a</think>b</think>c")], False)
    add([m(U, "q"), m(A, "\n\n<think>\n\nr\n\n</think>\n\n\n\nanswer\n\n")], False)
    add([m(U, "q"), m(A, "<think>r</think>a"), m(U, "<tool_response>\nresult\n</tool_response>")], True)
    add([m(U, "<tool_response>only</tool_response>")], True)
    # tools
    call = _call("get_weather", {"location": "Paris", "unit": "celsius"})
    add([m(U, "What's the weather in Paris?")], True, TOOLS)
    add([m(Sy, "You are a weather bot."), m(U, "  Weather in Paris?  ")], True, TOOLS)
    add([m(U, "Weather in Paris?"), m(A, "", tool_calls=[call]), m(T, '{"temperature": 21, "sky": "clear"}')],
        True, TOOLS)
    add([m(U, "Weather in Paris?"), m(A, "", tool_calls=[call]), m(T, '{"temperature": 21}'),
         m(A, "It is 21 °C and clear."), m(U, "Thanks! And 2×3?")], True, TOOLS)
    add([m(Sy, "sys"), m(U, "Two calls please"),
         m(A, "Calling both.", tool_calls=[call, _call("calculate", {"expression": "2×3"})]),
         m(T, "21 degrees"), m(T, "6")], True, TOOLS)
    add([m(U, "Compute"), m(A, "<think>need tool</think>", tool_calls=[_call("calculate", {"expression": "1+1"})]),
         m(T, "2")], True, TOOLS)
    add([m(Sy, "tools but only system")], True, TOOLS)
    return c


def random_conversations(corpus_inputs: list[tuple[str, str]], n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    natural = [t for src, t in corpus_inputs if not src.startswith(("hard-", "ws-", "digit-", "fuzz-", "invalid", "nul"))
               and len(t) <= 400]
    hard = [t for src, t in corpus_inputs if src.startswith(("hard-", "ws-", "digit-", "fuzz-", "invalid"))
            and len(t) <= 120]
    pads = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n"]

    def content() -> str:
        t = rng.choice(natural) if rng.random() < 0.6 else rng.choice(hard)
        if rng.random() < 0.15:
            t = rng.choice(pads) + t
        if rng.random() < 0.15:
            t = t + rng.choice(pads)
        return t

    def assistant() -> str:
        a = content()
        if rng.random() < 0.35:
            r = content()
            form = rng.randrange(6)
            a = [f"<think>\n{r}\n</think>\n\n{a}", f"<think>{r}</think>{a}", f"<think>\n\n</think>\n\n{a}",
                 f"{r}</think>\n\n{a}", f"\n<think>\n{r}\n</think>\n\n\n{a}", f"<think>{r}</think>\n{a}</think>x"][form]
        return a

    out = []
    for _ in range(n):
        turns = rng.randint(1, 4)
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": content()})
        end_assistant = rng.random() < 0.25
        for t in range(turns):
            msgs.append({"role": "user", "content": content()})
            if t < turns - 1 or end_assistant:
                msgs.append({"role": "assistant", "content": assistant()})
        out.append({"messages": msgs, "add_generation_prompt": not end_assistant})
    return out


# --------------------------------------------------------------------------------------------

def main() -> None:
    import gguf
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    from jinja2.exceptions import TemplateError

    OUT.mkdir(parents=True, exist_ok=True)
    corpus = tg.read_corpus()
    corpus_inputs = [(e["src"], tg.reference_input(e)) for e in corpus]
    convs = edge_conversations() + random_conversations(corpus_inputs, 240)
    for i, c in enumerate(convs):
        c["i"] = i
    conv_lines = []
    for c in convs:
        d = {"i": c["i"], "messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
        if "tools" in c:
            d["tools"] = c["tools"]
        conv_lines.append(tg.jdump(d))
    (OUT / "conversations.jsonl").write_bytes(("\n".join(conv_lines) + "\n").encode("utf-8"))

    # tokenizers and templates
    hf = {n: AutoTokenizer.from_pretrained(str(SHARED_TOK / n)) for n in ("qwen3", "gemma3", "llama3")}
    hf["smollm2"] = AutoTokenizer.from_pretrained(str(tg.MODELS), gguf_file=SMOLLM_GGUF)
    raw = {n: Tokenizer.from_file(str(SHARED_TOK / n / "tokenizer.json")) for n in ("qwen3", "gemma3", "llama3")}
    raw["smollm2"] = Tokenizer.from_str(hf["smollm2"].backend_tokenizer.to_str())
    hf["qwen25"] = AutoTokenizer.from_pretrained(str(tg.MODELS), gguf_file=QWEN25_GGUF)
    raw["qwen25"] = Tokenizer.from_str(hf["qwen25"].backend_tokenizer.to_str())
    # and its NFC normalizer, as the "qwen2.5-gguf-nfc" tokenizer goldens (the Qwen family's own)
    from tokenizers import normalizers
    raw["qwen25"].normalizer = normalizers.NFC()
    # transformers' GGUF conversion drops the GGUF's pre = "smollm" digit split; the ids use
    # the same derived tokenizer as the "smollm2-gguf-digits" tokenizer goldens (SmolLM's own
    # Digits(individual_digits=True) + ByteLevel pipeline, as llama.cpp's "smollm" regexes).
    from tokenizers import pre_tokenizers
    raw["smollm2"].pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    cfg = {n: json.load(open(SHARED_TOK / n / "tokenizer_config.json", encoding="utf-8"))
           for n in ("qwen3", "gemma3", "llama3")}
    assert cfg["llama3"]["chat_template"] == LLAMA30_TEMPLATE, "shared llama3 template is not the Llama 3.0 one"
    reader = gguf.GGUFReader(str(tg.MODELS / SMOLLM_GGUF))
    chatml = reader.fields["tokenizer.chat_template"].contents()
    assert hf["smollm2"].chat_template == chatml
    qwen25 = gguf.GGUFReader(str(tg.MODELS / QWEN25_GGUF)).fields["tokenizer.chat_template"].contents()
    assert hf["qwen25"].chat_template == qwen25

    TEMPLATES = {
        "qwen3-think": dict(tok="qwen3", template=cfg["qwen3"]["chat_template"], kwargs={"enable_thinking": True},
                            source="/work/shared/tokenizers/qwen3/tokenizer_config.json",
                            seg=lambda m, t, g: seg_qwen3(m, t, g, True)),
        "qwen3-nothink": dict(tok="qwen3", template=cfg["qwen3"]["chat_template"], kwargs={"enable_thinking": False},
                              source="/work/shared/tokenizers/qwen3/tokenizer_config.json",
                              seg=lambda m, t, g: seg_qwen3(m, t, g, False)),
        "gemma3": dict(tok="gemma3", template=cfg["gemma3"]["chat_template"], kwargs={},
                       source="/work/shared/tokenizers/gemma3/tokenizer_config.json", seg=seg_gemma3),
        "llama3.1": dict(tok="llama3", template=LLAMA31_TEMPLATE, kwargs={"date_string": LLAMA31_DATE},
                         source="embedded LLAMA31_TEMPLATE (public Llama-3.1-8B-Instruct template)", seg=seg_llama31),
        "llama3.0": dict(tok="llama3", template=cfg["llama3"]["chat_template"], kwargs={},
                         source="/work/shared/tokenizers/llama3/tokenizer_config.json (== embedded LLAMA30_TEMPLATE)",
                         seg=seg_llama30),
        "chatml": dict(tok="smollm2", template=chatml, kwargs={},
                       source="models/" + SMOLLM_GGUF + " tokenizer.chat_template", seg=seg_chatml),
        "qwen2.5": dict(tok="qwen25", template=qwen25, kwargs={},
                        source="models/" + QWEN25_GGUF + " tokenizer.chat_template",
                        seg=seg_qwen25),
    }

    meta = {"generator": "tools/make_template_goldens.py",
            "versions": {p: importlib.metadata.version(p) for p in ("transformers", "tokenizers", "jinja2", "gguf")},
            "n_conversations": len(convs), "templates": {}}
    for name, spec in TEMPLATES.items():
        tok_hf, tok_raw = hf[spec["tok"]], raw[spec["tok"]]
        rows = []
        n_rej = 0
        errors: dict[str, int] = {}
        for c in convs:
            tools = c.get("tools")
            try:
                text = tok_hf.apply_chat_template(c["messages"], tools=tools, chat_template=spec["template"],
                                                  add_generation_prompt=c["add_generation_prompt"], tokenize=False,
                                                  **spec["kwargs"])
                err = None
            except TemplateError as e:
                text, err = None, str(e)
            try:
                segs = spec["seg"](c["messages"], tools, c["add_generation_prompt"])
                model_err = None
            except Rejected as e:
                segs, model_err = None, str(e)
            if text is None:
                assert model_err == err, (name, c["i"], err, model_err)
                n_rej += 1
                errors[err] = errors.get(err, 0) + 1
                rows.append({"i": c["i"], "text": None, "error": err, "ids": None, "spans": None})
                continue
            assert model_err is None, (name, c["i"], model_err)
            joined = "".join(s[2] for s in segs)
            assert joined == text, (name, c["i"], joined, text)
            ids = tok_raw.encode(text, add_special_tokens=False).ids
            ids_hf = tok_hf.apply_chat_template(c["messages"], tools=tools, chat_template=spec["template"],
                                                add_generation_prompt=c["add_generation_prompt"], tokenize=True,
                                                **spec["kwargs"])["input_ids"]
            assert ids == ids_hf or spec["tok"] in ("smollm2", "qwen25"), (name, c["i"])
            spans = to_spans(segs)
            assert spans[-1][1] == len(text.encode("utf-8")) if spans else text == ""
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and (not spans or spans[0][0] == 0)
            rows.append({"i": c["i"], "text": text, "error": None, "ids": ids, "spans": spans})
        (OUT / f"{name}.jsonl").write_bytes("".join(tg.jdump(r) + "\n" for r in rows).encode("utf-8"))
        t = spec["template"]
        meta["templates"][name] = {
            "source": spec["source"], "template_sha256": hashlib.sha256(t.encode("utf-8")).hexdigest(),
            "template": t, "kwargs": spec["kwargs"],
            "tokenizer": {"smollm2": "models/" + SMOLLM_GGUF + " (transformers GGUF tokenizer + Digits(individual_digits) split)",
                          "qwen25": "models/" + QWEN25_GGUF + " (transformers GGUF tokenizer + NFC normalizer)"}.get(
                spec["tok"], tg.SHARED_TOK.as_posix() + "/" + spec["tok"] + "/tokenizer.json"),
            "special_tokens_map": tok_hf.special_tokens_map,
            "n_rendered": len(convs) - n_rej, "n_rejected": n_rej, "rejections": errors,
        }
        print(f"{name}: {len(convs) - n_rej} rendered, {n_rej} rejected {errors}", file=sys.stderr)
    (OUT / "meta.json").write_bytes((json.dumps(meta, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))
    total = sum(p.stat().st_size for p in OUT.iterdir() if p.is_file())
    print(f"{len(convs)} conversations; wrote {OUT} ({total / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
