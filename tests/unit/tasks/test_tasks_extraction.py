from swarmrl.tasks.config import AnswerExtractionConfig
from swarmrl.tasks.extraction import answer_region, final_math_answer, last_boxed, last_python_block


def test_boxed_with_nested_braces_takes_the_last():
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}} done") == r"\frac{1}{\sqrt{2}}"
    assert last_boxed(r"\boxed{unclosed {x}") is None
    assert last_boxed("no box") is None


def test_final_math_answer_fallbacks():
    assert final_math_answer("work\n\\boxed{42}\nmore") == "42"
    assert final_math_answer("lots of work\nAnswer: 3/4.\nThanks") == "3/4"
    assert final_math_answer("The final answer is: 7") == "7"
    assert final_math_answer("so\n\n  x = 5  \n") == "x = 5"
    assert final_math_answer("") == ""


def test_answer_region_conventions():
    auto = AnswerExtractionConfig()
    assert answer_region("I think 3</think> 4", auto) == "4"
    assert answer_region("<think>5</think> so <answer> 6 </answer>", auto) == "6"
    assert answer_region("<answer>1</answer> reasoning </think> 2", auto) == "2"
    assert answer_region("plain 9", auto) == "plain 9"
    strict = AnswerExtractionConfig(require_think_end=True)
    assert answer_region("never closed 3", strict) is None
    tag_only = AnswerExtractionConfig(mode="answer_tag")
    assert answer_region("</think> 4", tag_only) is None
    assert answer_region("<answer>a</answer><answer>b</answer>", tag_only) == "b"
    custom = AnswerExtractionConfig(mode="think", think_end_tag="<|end_reasoning|>")
    assert answer_region("x<|end_reasoning|>y", custom) == "y"
    assert answer_region(" all ", AnswerExtractionConfig(mode="raw")) == "all"


def test_last_python_block():
    text = "```python\nprint(1)\n```\ntext\n```bash\nls\n```\n```py\nprint(2)\n```\n"
    assert last_python_block(text) == "print(2)\n"
    assert last_python_block("```\nx = 1\n```") == "x = 1\n"
    assert last_python_block("```javascript\nx\n```") is None
    assert last_python_block("no code") is None


def test_hostile_extraction_inputs_stay_fast():
    import time

    started = time.monotonic()
    assert last_boxed("\\boxed{" * 200_000) is None
    assert last_boxed("\\boxed{1}" + "{" * 200_000) == "1"
    assert last_python_block("```python\n" * 50_000) is not None
    assert final_math_answer("x\n" * 200_000) == "x"
    assert time.monotonic() - started < 5


def test_boxed_nested_inside_boxed_returns_the_later_start():
    assert last_boxed(r"\boxed{a + \boxed{b}}") == "b"
    assert last_boxed(r"\fbox{z}") == "z"
