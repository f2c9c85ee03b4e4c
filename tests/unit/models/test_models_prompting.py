"""Prompts through a real chat template: the ids match transformers' `apply_chat_template`, stops include
the template's end-of-turn token, and the plain format of base models stays byte-for-byte what it was."""

import json

import pytest

from swarmrl.configs import ConfigError, load_config
from swarmrl.configs.model import PromptSection
from swarmrl.models.prompting import PromptError, prompt_format
from swarmrl.models.tokenizer import CHATML_THINK_TEMPLATE, IM_END, IM_START, train_tokenizer

CORPUS = [
    "Spell this word backward (example: sun -> nus): ohmic\nAnswer: cimho",
    "What is 12 + 30? Think step by step. <think>12 + 30 = 42</think> The answer is 42.",
    "You are a helpful assistant. Reverse the letters of the word.",
] * 20
QUESTIONS = ["Spell this word backward: ohmic", "What is {x} + 30? Keep {question} as it is.", "ü 日本"]

# Qwen2.5-style: ChatML with a default system turn when the conversation has none.
QWEN25_STYLE = """\
{%- if messages[0].role != 'system' %}
    {{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
# Llama-3-style: BOS from the template, header tokens, <|eot_id|> closes a turn.
LLAMA3_STYLE = """\
{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""


@pytest.fixture(scope="module")
def qwen3_like():
    """Shaped like Qwen3's tokenizer: ChatML template with <think>, <|im_end|> is EOS."""
    return train_tokenizer(CORPUS, vocab_size=300, chat_template=CHATML_THINK_TEMPLATE)


@pytest.fixture(scope="module")
def qwen25_base_like():
    """Shaped like a Qwen2.5 base tokenizer: a ChatML template, but EOS is <|eos|> (<|endoftext|>)."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tokenizer.chat_template = QWEN25_STYLE
    return tokenizer


@pytest.fixture(scope="module")
def plain():
    return train_tokenizer(CORPUS, vocab_size=300)


def reference_ids(tokenizer, messages, **kwargs):
    """transformers' own rendering and tokenisation of the conversation."""
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
    )


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False).input_ids


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("enable_thinking", [None, True, False])
@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_chat_prompt_ids_equal_apply_chat_template(qwen3_like, question, enable_thinking, system):
    settings = PromptSection(format="chat", system=system, enable_thinking=enable_thinking)
    prompts = prompt_format(qwen3_like, settings)
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": question}
    ]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    assert prompts.chat
    assert prompts.ids(question) == reference_ids(qwen3_like, messages, **kwargs)


def test_chat_prompt_is_chatml_with_qwen3_thinking_switch(qwen3_like):
    on = prompt_format(qwen3_like, PromptSection(format="chat", system="S"))
    off = prompt_format(qwen3_like, PromptSection(format="chat", system="S", enable_thinking=False))
    turns = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert on.text("Q?") == turns
    assert off.text("Q?") == turns + "<think>\n\n</think>\n\n"
    assert on.ids("Q?") == encode(qwen3_like, turns)
    assert off.ids("Q?")[: len(on.ids("Q?"))] == on.ids("Q?")
    im_start = qwen3_like.convert_tokens_to_ids(IM_START)
    assert on.ids("Q?").count(im_start) == 3  # one token per turn, not its characters


def test_user_template_wraps_the_question(qwen3_like):
    prompts = prompt_format(qwen3_like, PromptSection(user_template="Task: {question}\nAnswer briefly."))
    assert "<|im_start|>user\nTask: 2+2?\nAnswer briefly.<|im_end|>" in prompts.text("2+2?")


def test_template_default_system_turn_is_kept_unless_set(qwen25_base_like):
    default = prompt_format(qwen25_base_like, PromptSection(format="chat"))
    custom = prompt_format(qwen25_base_like, PromptSection(format="chat", system="Be terse."))
    assert default.text("q").startswith("<|im_start|>system\nYou are Qwen, a helpful assistant.<|im_end|>")
    assert custom.text("q").startswith("<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nq")
    assert default.ids("q") == reference_ids(qwen25_base_like, [{"role": "user", "content": "q"}])


def test_stop_tokens_lead_with_the_end_of_turn_token(qwen3_like, qwen25_base_like):
    im_end = qwen25_base_like.convert_tokens_to_ids(IM_END)
    base_chat = prompt_format(qwen25_base_like, PromptSection())
    # The base tokenizer's EOS is not <|im_end|>: a chat completion must still stop at <|im_end|>.
    assert base_chat.stop_token_ids == (im_end, qwen25_base_like.eos_token_id)
    assert base_chat.completion_ids("cimho") == [*encode(qwen25_base_like, "cimho"), im_end]
    qwen3 = prompt_format(qwen3_like, PromptSection())
    assert qwen3.stop_token_ids == (qwen3_like.convert_tokens_to_ids(IM_END),)
    assert qwen3_like.eos_token == IM_END


def test_end_of_turn_of_a_llama3_style_template(plain):
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]}
    )
    tokenizer.chat_template = LLAMA3_STYLE
    prompts = prompt_format(tokenizer, PromptSection())
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert prompts.stop_token_ids == (eot, tokenizer.eos_token_id)
    ids = prompts.ids("q")
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
    assert ids == reference_ids(tokenizer, [{"role": "user", "content": "q"}])


def test_extra_stop_tokens_are_single_tokens(qwen25_base_like):
    prompts = prompt_format(qwen25_base_like, PromptSection(stop_tokens=["<|bos|>"]))
    assert prompts.stop_token_ids[-1] == qwen25_base_like.bos_token_id
    with pytest.raises(PromptError, match="not one token"):
        prompt_format(qwen25_base_like, PromptSection(stop_tokens=["qz xv"]))


def test_plain_format_is_the_template_text_after_bos(plain, qwen3_like):
    settings = PromptSection(format="plain", template="{question}\nAnswer:")
    for tokenizer in (plain, qwen3_like):  # plain wins even when a chat template exists
        prompts = prompt_format(tokenizer, settings)
        assert not prompts.chat
        for question in QUESTIONS:
            text = question + "\nAnswer:"
            assert prompts.text(question) == text
            assert prompts.ids(question) == [tokenizer.bos_token_id, *encode(tokenizer, text)]
    no_bos = prompt_format(plain, settings.model_copy(update={"add_bos": False}))
    assert no_bos.ids("q") == encode(plain, "q\nAnswer:")
    assert no_bos.completion_ids(" cimho") == [*encode(plain, " cimho"), plain.eos_token_id]
    assert no_bos.stop_token_ids == (plain.eos_token_id,)


def test_auto_picks_chat_only_when_the_tokenizer_has_a_template(plain, qwen3_like):
    assert not prompt_format(plain, PromptSection()).chat
    assert prompt_format(qwen3_like, PromptSection()).chat


def test_chat_without_a_template_is_a_clear_error(plain):
    with pytest.raises(PromptError, match="no chat template"):
        prompt_format(plain, PromptSection(format="chat"))


def test_a_template_that_fails_is_a_prompt_error(plain):
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    tokenizer.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(PromptError, match="roles must alternate"):
        prompt_format(tokenizer, PromptSection(format="chat"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("prompt.template='no question here'", "must contain {question}"),
        ("prompt.user_template='Q:'", "must contain {question}"),
        ("prompt.chat_template_kwargs={enable_thinking=false}", "may not set"),
        ("prompt.format='jinja'", "format"),
    ],
)
def test_prompt_section_rejects_bad_settings(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_chat_template_kwargs_reach_the_template(qwen3_like):
    tokenizer = train_tokenizer(CORPUS, vocab_size=300, chat_template=CHATML_THINK_TEMPLATE)
    tokenizer.chat_template = CHATML_THINK_TEMPLATE.replace(
        "{{- '<|im_start|>assistant\\n' }}\n    {%- if",
        "{{- '<|im_start|>assistant\\n' + (mode or '') }}\n    {%- if",
    )
    prompts = prompt_format(tokenizer, PromptSection(chat_template_kwargs={"mode": "/brief"}))
    assert prompts.text("q").endswith("<|im_start|>assistant\n/brief")


def saved(tokenizer, directory, generation_config: dict):
    """The tokenizer as a checkpoint directory holds it, beside the model's generation_config.json."""
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(directory)
    (directory / "generation_config.json").write_text(json.dumps(generation_config))
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


def test_the_models_generation_eos_list_stops_too(qwen25_base_like, tmp_path):
    im_end = qwen25_base_like.convert_tokens_to_ids(IM_END)
    bos, eos = qwen25_base_like.bos_token_id, qwen25_base_like.eos_token_id
    loaded = saved(qwen25_base_like, tmp_path, {"eos_token_id": [eos, bos]})
    assert prompt_format(loaded, PromptSection()).stop_token_ids == (im_end, eos, bos)
    assert prompt_format(loaded, PromptSection(format="plain")).stop_token_ids == (eos, bos)


@pytest.mark.parametrize("eos", [10**6, [1, "x"], "2", True])
def test_a_bad_generation_eos_list_is_a_prompt_error(plain, tmp_path, eos):
    loaded = saved(plain, tmp_path, {"eos_token_id": eos})
    with pytest.raises(PromptError, match="eos_token_id"):
        prompt_format(loaded, PromptSection())
