import pytest

from swarmrl.configs.model import PromptSection
from swarmrl.envs.codec import PromptTurnCodec
from swarmrl.models.prompting import prompt_format


@pytest.mark.parametrize("system", [None, "Use the tool."])
def test_chat_turns_concatenate_to_the_templates_own_rendering(chat_tokenizer, system):
    codec = PromptTurnCodec(prompt_format(chat_tokenizer, PromptSection(format="chat", system=system)))
    answer = "```python\nprint(12 * 34)\n```"
    tool = "<output>\n408\n</output>"
    model_ids = [*chat_tokenizer(answer, add_special_tokens=False).input_ids, codec.stop_token_ids[0]]
    ours = codec.first_ids("What is 12 * 34?") + model_ids + codec.env_ids(tool)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": "What is 12 * 34?"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": tool},
    ]
    reference = chat_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ours == list(reference)
    assert codec.model_text(model_ids) == answer


def test_plain_format_puts_env_turns_on_their_own_lines(chat_tokenizer):
    codec = PromptTurnCodec(prompt_format(chat_tokenizer, PromptSection(format="plain")))
    assert chat_tokenizer.decode(codec.env_ids("<output>\n1\n</output>")) == "\n<output>\n1\n</output>\n"
