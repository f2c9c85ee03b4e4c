from swarmrl.configs.tasks import AnswerExtractionConfig
from swarmrl.tasks.extraction import answer_region, answer_text, last_python_block


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


def test_answer_text_keeps_the_whitespace_math_verify_reads():
    auto = AnswerExtractionConfig()
    assert answer_text("<think>r</think> so [9] \n", auto) == " so [9] \n"
    assert answer_text("<answer> \\[ 6 \\] </answer>", auto) == " \\[ 6 \\] "
    assert answer_text("never closed", AnswerExtractionConfig(require_think_end=True)) is None
    assert answer_text("</think> 4", AnswerExtractionConfig(mode="answer_tag")) is None


def test_last_python_block():
    text = "```python\nprint(1)\n```\ntext\n```bash\nls\n```\n```py\nprint(2)\n```\n"
    assert last_python_block(text) == "print(2)\n"
    assert last_python_block("```\nx = 1\n```") == "x = 1\n"
    assert last_python_block("```javascript\nx\n```") is None
    assert last_python_block("no code") is None


def test_hostile_extraction_inputs_stay_fast():
    import time

    # Against an anchor timed here: a benign text as long. A quadratic scan would take thousands of times as long.
    started = time.monotonic()
    assert last_python_block("```python\n" + "x = 1\n" * 50_000 + "```") is not None
    assert answer_region("y" * 800_000 + "</think>x", AnswerExtractionConfig()) == "x"
    anchor = time.monotonic() - started
    started = time.monotonic()
    assert last_python_block("```python\n" * 50_000) is not None
    assert answer_region("</think>" * 100_000 + "x", AnswerExtractionConfig()) == "x"
    assert time.monotonic() - started < 50 * anchor + 0.5
