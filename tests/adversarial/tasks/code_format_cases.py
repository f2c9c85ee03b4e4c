"""Hand-labelled cases for every test format users bring (issue 58), each row written as its dataset writes it.

Every row is a small problem of our own in the exact layout of a public dataset (MBPP's full and sanitized
files, HumanEval, APPS, TACO, CodeContests, LiveCodeBench's code_generation_lite, LeetCodeDataset, KodCode,
INTELLECT-2's `test_cases`, and plain pytest / unittest files). Each completion's label was decided by hand
from what the dataset's own harness means by a pass, before the judge was run on it: 1 = a right solution,
0 = a wrong, empty or cheating one. A label the judge does not give is a false pass or a false fail.
"""

import base64
import json
import pickle
import zlib

WRONG_EXITS = [
    "import sys\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
    "raise SystemExit(0)\n",
    "exit(0)\n",
    "pass\n",
    "print('OK: all tests passed')\n",
]


def ours(prompt: str, **info) -> dict:
    """A row in swarmrl's own layout (INTELLECT-2's columns), as a user writes a pytest or unittest file in."""
    return {"prompt": prompt, "task_type": "code", "verification_info": info}


def lcb_compressed(cases: list[dict]) -> str:
    """LiveCodeBench code_generation_lite's private_test_cases: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


KODCODE_PALINDROME = {
    "version": "v1.0",
    "style": "instruct",
    "subset": "Leetcode",
    "question_id": "Leetcode_1_I",
    "question": "Write a function that returns True when a string reads the same backwards, else False.",
    "solution": "def is_palindrome(s):\n    return s == s[::-1]\n",
    "test": (
        "from solution import is_palindrome\nimport pytest\n\n"
        "def test_palindrome():\n    assert is_palindrome('racecar') is True\n\n"
        "def test_not_palindrome():\n    assert is_palindrome('abc') is False\n\n"
        "@pytest.mark.parametrize('text', ['', 'a', 'abba'])\n"
        "def test_trivial(text):\n    assert is_palindrome(text)\n"
    ),
    "test_info": [
        {
            "function_name": "is_palindrome",
            "parameter_list": "(s)",
            "function_declaration": "def is_palindrome(s):",
            "docstring": None,
        }
    ],
    "gpt_pass_sequence": [1, 1, 1],
    "gpt_pass_trial_num": 3,
    "gpt_difficulty": "easy",
    "gpt_pass_percentage": 1.0,
}
KODCODE_STACK = {
    "question_id": "Evol_2_I",
    "question": "Implement a class MinStack with push, pop, top and get_min; pop on an empty stack raises "
    "IndexError.",
    "solution": "",
    "test": (
        "import pytest\nfrom solution import MinStack\n\n"
        "class TestMinStack:\n"
        "    def setup_method(self):\n        self.stack = MinStack()\n\n"
        "    def test_min(self):\n        for x in (5, 2, 7):\n            self.stack.push(x)\n"
        "        assert self.stack.get_min() == 2\n        assert self.stack.top() == 7\n"
        "        self.stack.pop()\n        self.stack.pop()\n        assert self.stack.get_min() == 5\n\n"
        "    def test_empty(self):\n        with pytest.raises(IndexError):\n            self.stack.pop()\n"
    ),
    "test_info": [
        {
            "function_name": "MinStack",
            "parameter_list": "()",
            "function_declaration": "class MinStack:",
            "docstring": None,
        }
    ],
}
MIN_STACK = (
    "class MinStack:\n    def __init__(self):\n        self.items, self.mins = [], []\n"
    "    def push(self, x):\n        self.items.append(x)\n"
    "        self.mins.append(min(x, self.mins[-1]) if self.mins else x)\n"
    "    def pop(self):\n        self.mins.pop()\n        return self.items.pop()\n"
    "    def top(self):\n        return self.items[-1]\n    def get_min(self):\n        return self.mins[-1]\n"
)
KODCODE_AGE = {
    "question_id": "Evol_3_I",
    "question": "Write validate_age(age): return age if 0 <= age <= 150, else raise an error derived from "
    "ValueError named InvalidAge; also mean(values) for a list of numbers, and report(name) that prints "
    "'Hello, <name>!'.",
    "solution": "",
    "test": (
        "import pytest\nfrom solution import validate_age, InvalidAge, mean, report\n\n"
        "def test_valid():\n    assert validate_age(30) == 30\n\n"
        "def test_invalid_is_a_value_error():\n    with pytest.raises(ValueError):\n        validate_age(-1)\n\n"
        "def test_invalid_is_its_own_type():\n    with pytest.raises(InvalidAge):\n        validate_age(200)\n\n"
        "def test_mean():\n    assert mean([0.1, 0.2]) == pytest.approx(0.15)\n\n"
        "def test_report(capsys):\n    report('Ada')\n    assert capsys.readouterr().out == 'Hello, Ada!\\n'\n"
    ),
}
AGE_RIGHT = (
    "class InvalidAge(ValueError):\n    pass\n"
    "def validate_age(age):\n    if not 0 <= age <= 150:\n        raise InvalidAge(age)\n    return age\n"
    "def mean(values):\n    return sum(values) / len(values)\n"
    "def report(name):\n    print(f'Hello, {name}!')\n"
)
PYTEST_VACUOUS = ours(
    "Write anything.",
    test="def test_nothing():\n    assert True\n\ndef test_more():\n    assert 1 + 1 == 2\n",
)
PYTEST_SWALLOWED = ours(
    "Write double(x).",
    test=(
        "from solution import double\n\n"
        "def test_double():\n    try:\n        assert double(2) == 4\n    except AssertionError:\n"
        "        print('mismatch')\n"
    ),
)
UNITTEST_BARE_MAIN = ours(
    "Write add(a, b).",
    test=(
        "import unittest\nfrom solution import add\n\n"
        "class TestAdd(unittest.TestCase):\n"
        "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n"
        "    def test_negative(self):\n        self.assertEqual(add(-1, -1), -2)\n\n"
        "unittest.main()\n"
    ),
)
UNITTEST_MAIN_ARGS = ours(
    "Write Solution.twoSum.",
    test=(
        "import unittest\nfrom solution import Solution\n\n"
        "class TestTwoSum(unittest.TestCase):\n"
        "    def setUp(self):\n        self.solution = Solution()\n\n"
        "    def test_example(self):\n"
        "        self.assertEqual(self.solution.twoSum([2, 7, 11, 15], 9), [0, 1])\n\n"
        "    def test_other(self):\n        self.assertEqual(sorted(self.solution.twoSum([3, 2, 4], 6)), [1, 2])\n\n"
        "if __name__ == '__main__':\n    unittest.main(argv=['first-arg-is-ignored'], exit=False)\n"
    ),
)
TWO_SUM = (
    "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
    "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
    "                return [seen[target - x], i]\n            seen[x] = i\n"
)
UNITTEST_RAISES = ours(
    "Write parse_int(s), raising ValueError for non-digits.",
    test=(
        "import unittest\nfrom solution import parse_int\n\n"
        "class TestParse(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertEqual(parse_int('42'), 42)\n"
        "    def test_bad(self):\n        with self.assertRaises(ValueError):\n            parse_int('x')\n\n"
        "unittest.main(verbosity=2, exit=False)\n"
    ),
)
UNITTEST_NO_TESTS = ours(
    "Write add(a, b).",
    test="import unittest\nfrom solution import add\n\nclass TestAdd(unittest.TestCase):\n    pass\n\n"
    "if __name__ == '__main__':\n    unittest.main()\n",
)
UNITTEST_ALL_SKIPPED = ours(
    "Write add(a, b).",
    test=(
        "import unittest\nfrom solution import add\n\nclass TestAdd(unittest.TestCase):\n"
        "    @unittest.skip('later')\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
)
MBPP_FULL = {
    "task_id": 901,
    "text": "Write a function to find the second largest distinct number in a list.",
    "code": "def second_largest(xs):\n    return sorted(set(xs))[-2]",
    "test_list": [
        "assert second_largest([1, 2, 3]) == 2",
        "assert second_largest([5, 5, 4]) == 4",
        "assert second_largest([10, 20, 20, 30]) == 20",
    ],
    "test_setup_code": "",
    "challenge_test_list": [],
}
MBPP_SANITIZED = {
    "source_file": "Benchmark Questions Verification V2.ipynb",
    "task_id": 902,
    "prompt": "Write a function to find the circumference of a circle of radius r.",
    "code": "import math\ndef circumference(r):\n  return 2 * math.pi * r",
    "test_imports": ["import math"],
    "test_list": [
        "assert math.isclose(circumference(1), 6.283185, rel_tol=0.001)",
        "assert math.isclose(circumference(2.5), 15.707963, rel_tol=0.001)",
    ],
}
MBPP_SETUP = {
    "task_id": 903,
    "text": "Write a function to count the leaves of a binary tree given as nested tuples (value, left, right).",
    "code": "",
    "test_list": ["assert count_leaves(TREE) == 2", "assert count_leaves(LEAF) == 1"],
    "test_setup_code": "LEAF = (1, None, None)\nTREE = (0, LEAF, (2, None, None))",
    "challenge_test_list": ["assert count_leaves((0, TREE, TREE)) == 4"],
}
HUMANEVAL_ROW = {
    "task_id": "Own/0",
    "prompt": 'def running_max(numbers):\n    """Return the running maximum.\n    >>> running_max([1, 3, 2])\n'
    '    [1, 3, 3]\n    """\n',
    "canonical_solution": "    out, best = [], None\n    for n in numbers:\n"
    "        best = n if best is None else max(best, n)\n        out.append(best)\n    return out\n",
    "test": "\n\nMETADATA = {'author': 'swarmrl', 'dataset': 'test'}\n\n\ndef check(candidate):\n"
    "    assert candidate([]) == []\n    assert candidate([1, 3, 2]) == [1, 3, 3]\n"
    "    assert candidate([5, 4, 6]) == [5, 5, 6]\n",
    "entry_point": "running_max",
}
APPS_STDIN = {
    "problem_id": 9001,
    "question": "Read two integers a and b and print a*b.",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a * b)\n"]),
    "input_output": json.dumps({"inputs": ["2 3\n", "-4 5\n"], "outputs": ["6\n", "-20\n"]}),
    "difficulty": "introductory",
    "url": "https://example.invalid/problem/9001",
    "starter_code": "",
}
APPS_CALL = {
    "problem_id": 9002,
    "question": "Return the sum of the positive numbers of a list.",
    "solutions": json.dumps(["def positive_sum(arr):\n    return sum(x for x in arr if x > 0)\n"]),
    "input_output": json.dumps(
        {
            "fn_name": "positive_sum",
            "inputs": [[[1, -4, 7, 12]], [[]], [[-1, -2]]],
            "outputs": [[20], [0], [0]],
        }
    ),
    "difficulty": "introductory",
    "url": "https://example.invalid/problem/9002",
    "starter_code": "def positive_sum(arr):\n\t",
}
APPS_CALL_LIST = {
    "problem_id": 9003,
    "question": "Return the minimum and the maximum of a list, in a list.",
    "solutions": "",
    "input_output": json.dumps(
        {"fn_name": "min_max", "inputs": [[[3, 1, 2]], [[5]]], "outputs": [[[1, 3]], [[5, 5]]]}
    ),
    "difficulty": "introductory",
    "url": "https://example.invalid/problem/9003",
    "starter_code": "def min_max(lst):\n\t",
}
TACO_ROW = {
    "question": "Given n, print the numbers 1..n, one per line.",
    "solutions": json.dumps(["n = int(input())\nfor i in range(1, n + 1):\n    print(i)\n"]),
    "starter_code": "",
    "input_output": json.dumps({"inputs": [["3"], ["1"]], "outputs": [["1", "2", "3"], ["1"]]}),
    "difficulty": "EASY",
    "raw_tags": "['Implementation']",
    "name": "count-up",
    "source": "codechef",
    "tags": "['Implementation']",
    "skill_types": "['Implementation']",
    "url": "https://example.invalid/countup",
    "Expected Auxiliary Space": None,
    "time_limit": "1 seconds",
    "date": "2021-01-01",
    "picture_num": "0",
    "memory_limit": "256 megabytes",
    "Expected Time Complexity": None,
}
CODE_CONTESTS = {
    "name": "9999_A. Max of three",
    "description": "Given three integers, print the largest.",
    "public_tests": {"input": ["1 2 3\n"], "output": ["3\n"]},
    "private_tests": {"input": ["-5 -2 -9\n", "7 7 1\n"], "output": ["-2\n", "7\n"]},
    "generated_tests": {"input": ["0 0 0\n"], "output": ["0\n"]},
    "source": 2,
    "difficulty": 7,
    "solutions": {"language": [3, 2], "solution": ["print(max(map(int, input().split())))", "int main(){}"]},
    "incorrect_solutions": {"language": [], "solution": []},
    "cf_contest_id": 9999,
    "cf_index": "A",
    "cf_points": 500.0,
    "cf_rating": 800,
    "cf_tags": ["implementation"],
    "is_description_translated": False,
    "untranslated_description": "",
    "time_limit": {"seconds": 1, "nanos": 0},
    "memory_limit_bytes": 256000000,
    "input_file": "",
    "output_file": "",
}
LCB_STDIN = {
    "question_title": "Sum of list",
    "question_content": "The first line holds n, the second n integers. Print their sum.",
    "platform": "atcoder",
    "question_id": "abc999_a",
    "contest_id": "abc999",
    "contest_date": "2024-01-01T00:00:00",
    "starter_code": "",
    "difficulty": "easy",
    "public_test_cases": json.dumps([{"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"}]),
    "private_test_cases": lcb_compressed([{"input": "2\n-1 1\n", "output": "0\n", "testtype": "stdin"}]),
    "metadata": "{}",
}
LCB_FUNCTIONAL = {
    "question_title": "Largest gap",
    "question_content": "Return the largest difference between two adjacent numbers of nums after sorting.",
    "platform": "leetcode",
    "question_id": "9998",
    "contest_id": "weekly-contest-999",
    "contest_date": "2024-01-01T00:00:00",
    "starter_code": "class Solution:\n    def maximumGap(self, nums: List[int]) -> int:\n        ",
    "difficulty": "medium",
    "public_test_cases": json.dumps([{"input": "[3, 6, 9, 1]", "output": "3", "testtype": "functional"}]),
    "private_test_cases": lcb_compressed([{"input": "[10]", "output": "0", "testtype": "functional"}]),
    "metadata": json.dumps({"func_name": "maximumGap"}),
}
GAP_RIGHT = (
    "class Solution:\n    def maximumGap(self, nums: List[int]) -> int:\n        s = sorted(nums)\n"
    "        return max((b - a for a, b in zip(s, s[1:])), default=0)\n"
)
LEETCODE_DATASET = {
    "task_id": "valid-parentheses-own",
    "question_id": 99001,
    "difficulty": "Easy",
    "tags": ["String", "Stack"],
    "problem_description": "Given a string of brackets, return whether it is valid.",
    "starter_code": "class Solution:\n    def isValid(self, s: str) -> bool:\n        ",
    "estimated_date": "2015-08-07 00:00:00",
    "prompt": "from typing import *\n\nfrom collections import *\n\ninf = float('inf')\n",
    "completion": "",
    "entry_point": "Solution().isValid",
    "test": 'def check(candidate):\n    assert candidate(s = "()[]{}") == True\n'
    '    assert candidate(s = "(]") == False\n    assert candidate(s = "([)]") == False\n',
    "input_output": [{"input": 's = "()[]{}"', "output": "True"}],
    "query": "Given a string s of brackets, return whether it is valid.\n```python\nclass Solution:\n"
    "    def isValid(self, s: str) -> bool:\n```",
    "response": "",
}
VALID_RIGHT = (
    "class Solution:\n    def isValid(self, s: str) -> bool:\n        pairs = {')': '(', ']': '[', '}': '{'}\n"
    "        stack: List[str] = []\n        for c in s:\n            if c in pairs:\n"
    "                if not stack or stack.pop() != pairs[c]:\n                    return False\n"
    "            else:\n                stack.append(c)\n        return not stack\n"
)
# LeetCodeDataset's layout for linked-list and tree problems: its `prompt` defines the node classes and the
# helpers its tests call (our own versions of them here).
LEETCODE_NODES_PROMPT = (
    "from typing import *\nfrom collections import deque\n\n"
    "class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val = val\n        self.next = next\n\n"
    "class TreeNode:\n    def __init__(self, val=0, left=None, right=None):\n        self.val = val\n"
    "        self.left = left\n        self.right = right\n\n"
    "def list_node(values, cycle_at=-1):\n    nodes = [ListNode(v) for v in values]\n"
    "    for a, b in zip(nodes, nodes[1:]):\n        a.next = b\n"
    "    if nodes and cycle_at >= 0:\n        nodes[-1].next = nodes[cycle_at]\n"
    "    return nodes[0] if nodes else None\n\n"
    "def is_same_list(a, b):\n    while a and b:\n        if a.val != b.val:\n            return False\n"
    "        a, b = a.next, b.next\n    return a is None and b is None\n\n"
    "def tree_node(values):\n    if not values:\n        return None\n    root = TreeNode(values[0])\n"
    "    queue, index = deque([root]), 1\n    while queue and index < len(values):\n"
    "        node = queue.popleft()\n        for side in ('left', 'right'):\n"
    "            if index < len(values) and values[index] is not None:\n"
    "                setattr(node, side, TreeNode(values[index]))\n                queue.append(getattr(node, side))\n"
    "            index += 1\n    return root\n\n"
    "def is_same_tree(p, q):\n    if p is None or q is None:\n        return p is q\n"
    "    return p.val == q.val and is_same_tree(p.left, q.left) and is_same_tree(p.right, q.right)\n"
)


def leetcode_nodes(task_id: str, entry_point: str, test: str) -> dict:
    return {
        **LEETCODE_DATASET,
        "task_id": task_id,
        "prompt": LEETCODE_NODES_PROMPT,
        "entry_point": entry_point,
        "test": test,
        "query": f"Solve {task_id}.",
    }


REVERSE_LIST = leetcode_nodes(
    "reverse-linked-list-own",
    "Solution().reverseList",
    "def check(candidate):\n    assert is_same_list(candidate(head = list_node([1, 2, 3])), list_node([3, 2, 1]))\n"
    "    assert candidate(head = list_node([])) is None\n",
)
REORDER_LIST = leetcode_nodes(
    "reorder-list-own",
    "Solution().reorderList",
    "def check(candidate):\n    head = list_node([1, 2, 3, 4])\n    candidate(head)\n"
    "    assert is_same_list(head, list_node([1, 4, 2, 3]))\n",
)
HAS_CYCLE = leetcode_nodes(
    "linked-list-cycle-own",
    "Solution().hasCycle",
    "def check(candidate):\n    assert candidate(head = list_node([3, 2, 0, -4], cycle_at=1)) == True\n"
    "    assert candidate(head = list_node([1, 2])) == False\n",
)
INVERT_TREE = leetcode_nodes(
    "invert-binary-tree-own",
    "Solution().invertTree",
    "def check(candidate):\n    assert is_same_tree(candidate(root = tree_node([4, 2, 7, 1, 3, 6, 9])), "
    "tree_node([4, 7, 2, 9, 6, 3, 1]))\n    assert candidate(root = tree_node([])) is None\n",
)
REVERSE_RIGHT = (
    "class Solution:\n    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n"
    "        prev = None\n        while head:\n            head.next, prev, head = prev, head, head.next\n"
    "        return prev\n"
)
REORDER_RIGHT = (
    "class Solution:\n    def reorderList(self, head: Optional[ListNode]) -> None:\n        nodes = []\n"
    "        while head:\n            nodes.append(head)\n            head = head.next\n"
    "        order, i, j = [], 0, len(nodes) - 1\n        while i <= j:\n            order.append(nodes[i])\n"
    "            if i != j:\n                order.append(nodes[j])\n            i, j = i + 1, j - 1\n"
    "        for a, b in zip(order, order[1:]):\n            a.next = b\n        order[-1].next = None\n"
)
CYCLE_RIGHT = (
    "class Solution:\n    def hasCycle(self, head: Optional[ListNode]) -> bool:\n        seen = set()\n"
    "        while head:\n            if id(head) in seen:\n                return True\n"
    "            seen.add(id(head))\n            head = head.next\n        return False\n"
)
INVERT_RIGHT = (
    "class Solution:\n    def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:\n"
    "        if root:\n            root.left, root.right = self.invertTree(root.right), self.invertTree(root.left)\n"
    "        return root\n"
)
INTELLECT2_STRING = {
    "task_id": "i2/str",
    "prompt": "Write to_json_list(n) that returns the string '[1, 2, ..., n]'.",
    "task_type": "verifiable_code",
    "verification_info": json.dumps(
        {
            "language": "python",
            "test_cases": [
                {"type": "function_call", "fn_name": "to_json_list", "input": [3], "output": "[1, 2, 3]"},
                {"type": "function_call", "fn_name": "to_json_list", "input": [1], "output": "[1]"},
            ],
        }
    ),
}
INTELLECT2_FLOAT_AND_LIST = {
    "task_id": "i2/float",
    "prompt": "Write third(x) returning x / 3, and singleton(x) returning [x].",
    "task_type": "verifiable_code",
    "verification_info": json.dumps(
        {
            "test_cases": [
                {"type": "function_call", "fn_name": "third", "input": [0.9], "output": 0.3},
                {"type": "function_call", "fn_name": "singleton", "input": [4], "output": [4]},
            ]
        }
    ),
}
MUTATION = {
    "task_id": "mut",
    "prompt": "Write rotate(lst, k) rotating lst in place by k to the right (returns None), and total(lst).",
    "task_type": "code",
    "verification_info": {
        "test": "lst = [1, 2, 3, 4]\nrotate(lst, 1)\nassert lst == [4, 1, 2, 3]\n"
        "values = [1, 2, 3]\nassert total(values) == 6\nassert values == [1, 2, 3]\n"
    },
}
CHECKER = {
    "task_id": "any-pair",
    "prompt": "Read n and print any two positive integers whose sum is n, on one line, or NO when there are "
    "none.",
    "task_type": "code",
    "verification_info": {
        "test_cases": [
            {"type": "stdin_stdout", "input": "5\n", "output": "2 3\n"},
            {"type": "stdin_stdout", "input": "1\n", "output": "NO\n"},
        ],
        "case_sensitive": False,
        "checker": (
            "def check(input, output, expected):\n    n = int(input)\n    words = output.split()\n"
            "    if expected.strip().upper() == 'NO':\n        return [w.upper() for w in words] == ['NO']\n"
            "    return len(words) == 2 and all(w.isdigit() and int(w) > 0 for w in words) "
            "and sum(map(int, words)) == n\n"
        ),
    },
}
TOLERANCE = {
    "task_id": "tol",
    "prompt": "Print the square root of n with four decimals.",
    "task_type": "code",
    "verification_info": {
        "test_cases": [{"type": "stdin_stdout", "input": "2\n", "output": "1.4142\n"}],
        "float_tolerance": 1e-4,
    },
}
RICH = {
    "task_id": "rich",
    "prompt": "Write point(x, y) -> namedtuple Point, ratio(a, b) -> Fraction, letters(s) -> Counter, "
    "squares(n) -> a generator of the first n squares, tomorrow(d) -> date + 1 day, doubled(v) -> numpy array.",
    "task_type": "code",
    "verification_info": {
        "test": (
            "from fractions import Fraction\nimport collections, datetime\nimport numpy as np\n"
            "from solution import point, ratio, letters, squares, tomorrow, doubled\n\n"
            "def test_point():\n    p = point(1, 2)\n    assert p.x == 1 and p == (1, 2)\n\n"
            "def test_ratio():\n    assert ratio(1, 3) == Fraction(1, 3)\n\n"
            "def test_letters():\n    assert letters('aab') == collections.Counter(a=2, b=1)\n\n"
            "def test_squares():\n    assert list(squares(4)) == [0, 1, 4, 9]\n\n"
            "def test_tomorrow():\n    assert tomorrow(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)\n\n"
            "def test_doubled():\n    assert np.array_equal(doubled(np.array([1, 2])), np.array([2, 4]))\n"
        )
    },
}
RICH_RIGHT = (
    "import collections, datetime\nfrom fractions import Fraction\nimport numpy as np\n"
    "Point = collections.namedtuple('Point', 'x y')\n"
    "def point(x, y):\n    return Point(x, y)\n"
    "def ratio(a, b):\n    return Fraction(a, b)\n"
    "def letters(s):\n    return collections.Counter(s)\n"
    "def squares(n):\n    for i in range(n):\n        yield i * i\n"
    "def tomorrow(d):\n    return d + datetime.timedelta(days=1)\n"
    "def doubled(v):\n    return v * 2\n"
)

# (name, row as the dataset writes it, completion code, label)
CASES = [
    ("kodcode palindrome right", KODCODE_PALINDROME, KODCODE_PALINDROME["solution"], 1),
    ("kodcode palindrome always false", KODCODE_PALINDROME, "def is_palindrome(s):\n    return False\n", 0),
    ("kodcode palindrome truthy string", KODCODE_PALINDROME, "def is_palindrome(s):\n    return 'yes'\n", 0),
    ("kodcode palindrome empty body", KODCODE_PALINDROME, "def is_palindrome(s):\n    ...\n", 0),
    ("kodcode class right", KODCODE_STACK, MIN_STACK, 1),
    (
        "kodcode class min wrong",
        KODCODE_STACK,
        MIN_STACK.replace("return self.mins[-1]", "return min(self.items[:1] or [0])"),
        0,
    ),
    (
        "kodcode class empty pop returns None",
        KODCODE_STACK,
        MIN_STACK.replace("        self.mins.pop()\n        return self.items.pop()", "        return None"),
        0,
    ),
    ("kodcode exceptions, approx, capsys right", KODCODE_AGE, AGE_RIGHT, 1),
    (
        "kodcode raises plain Exception",
        KODCODE_AGE,
        AGE_RIGHT.replace("class InvalidAge(ValueError)", "class InvalidAge(Exception)"),
        0,
    ),
    ("kodcode mean exact float", KODCODE_AGE, AGE_RIGHT.replace("sum(values) / len(values)", "0.15"), 1),
    ("kodcode prints wrong text", KODCODE_AGE, AGE_RIGHT.replace("Hello, {name}!", "Hi {name}"), 0),
    ("pytest tests that never call the solution", PYTEST_VACUOUS, "def anything():\n    return 1\n", 0),
    ("pytest assert failure swallowed", PYTEST_SWALLOWED, "def double(x):\n    return x + 1\n", 0),
    ("pytest assert failure swallowed, right", PYTEST_SWALLOWED, "def double(x):\n    return 2 * x\n", 1),
    ("unittest bare main right", UNITTEST_BARE_MAIN, "def add(a, b):\n    return a + b\n", 1),
    ("unittest bare main wrong", UNITTEST_BARE_MAIN, "def add(a, b):\n    return abs(a + b)\n", 0),
    ("unittest main argv exit right", UNITTEST_MAIN_ARGS, TWO_SUM, 1),
    (
        "unittest main argv exit wrong",
        UNITTEST_MAIN_ARGS,
        TWO_SUM.replace("[seen[target - x], i]", "[i, i]"),
        0,
    ),
    (
        "unittest assertRaises right",
        UNITTEST_RAISES,
        "class BadNumber(ValueError):\n    pass\ndef parse_int(s):\n    if not s.isdigit():\n"
        "        raise BadNumber(s)\n    return int(s)\n",
        1,
    ),
    (
        "unittest assertRaises wrong",
        UNITTEST_RAISES,
        "def parse_int(s):\n    return int(s) if s.isdigit() else 0\n",
        0,
    ),
    ("unittest no test methods", UNITTEST_NO_TESTS, "def add(a, b):\n    return a + b\n", 0),
    ("unittest all skipped", UNITTEST_ALL_SKIPPED, "def add(a, b):\n    return a + b\n", 0),
    ("mbpp full right", MBPP_FULL, MBPP_FULL["code"], 1),
    ("mbpp full wrong", MBPP_FULL, "def second_largest(xs):\n    return sorted(xs)[-2]\n", 0),
    (
        "mbpp full shadows sorted",
        MBPP_FULL,
        "def sorted(x):\n    return [0, 2]\ndef second_largest(xs):\n    return 0\n",
        0,
    ),
    ("mbpp sanitized right", MBPP_SANITIZED, MBPP_SANITIZED["code"], 1),
    ("mbpp sanitized wrong", MBPP_SANITIZED, "def circumference(r):\n    return 3.14 * r * r\n", 0),
    (
        "mbpp setup code right",
        MBPP_SETUP,
        "def count_leaves(t):\n    if t is None:\n        return 0\n    v, l, r = t\n"
        "    return 1 if l is None and r is None else count_leaves(l) + count_leaves(r)\n",
        1,
    ),
    ("mbpp setup code wrong", MBPP_SETUP, "def count_leaves(t):\n    return 1\n", 0),
    ("humaneval row right", HUMANEVAL_ROW, HUMANEVAL_ROW["prompt"] + HUMANEVAL_ROW["canonical_solution"], 1),
    (
        "humaneval row wrong",
        HUMANEVAL_ROW,
        "def running_max(numbers):\n    return sorted(numbers)\n",
        0,
    ),
    ("apps stdin right", APPS_STDIN, "a, b = map(int, input().split())\nprint(a * b)\n", 1),
    ("apps stdin wrong", APPS_STDIN, "a, b = map(int, input().split())\nprint(abs(a * b))\n", 0),
    ("apps call right", APPS_CALL, "def positive_sum(arr):\n    return sum(x for x in arr if x > 0)\n", 1),
    (
        "apps call wraps its answer in a list",
        APPS_CALL,
        "def positive_sum(arr):\n    return [sum(x for x in arr if x > 0)]\n",
        0,
    ),
    (
        "apps call answers a string",
        APPS_CALL,
        "def positive_sum(arr):\n    return str(sum(x for x in arr if x > 0))\n",
        0,
    ),
    (
        "apps call list answer as tuple",
        APPS_CALL_LIST,
        "def min_max(lst):\n    return (min(lst), max(lst))\n",
        1,
    ),
    (
        "apps call list answer nested",
        APPS_CALL_LIST,
        "def min_max(lst):\n    return [[min(lst), max(lst)]]\n",
        0,
    ),
    ("taco lines right", TACO_ROW, "n = int(input())\nfor i in range(1, n + 1):\n    print(i)\n", 1),
    ("taco lines wrong", TACO_ROW, "n = int(input())\nprint(*range(1, n + 1))\n", 0),
    ("codecontests right", CODE_CONTESTS, "print(max(map(int, input().split())))\n", 1),
    (
        "codecontests fails a private test",
        CODE_CONTESTS,
        "a, b, c = map(int, input().split())\nprint(c)\n",
        0,
    ),
    ("lcb stdin right", LCB_STDIN, "input()\nprint(sum(map(int, input().split())))\n", 1),
    ("lcb stdin fails the private test", LCB_STDIN, "input()\nprint(6)\n", 0),
    ("lcb functional right", LCB_FUNCTIONAL, GAP_RIGHT, 1),
    (
        "lcb functional module-level function",
        LCB_FUNCTIONAL,
        "def maximumGap(nums):\n    s = sorted(nums)\n    return max((b - a for a, b in zip(s, s[1:])), default=0)\n",
        1,
    ),
    ("lcb functional wrong", LCB_FUNCTIONAL, GAP_RIGHT.replace("default=0", "default=1"), 0),
    ("leetcodedataset right (List from the prompt's imports)", LEETCODE_DATASET, VALID_RIGHT, 1),
    (
        "leetcodedataset wrong",
        LEETCODE_DATASET,
        "class Solution:\n    def isValid(self, s: str) -> bool:\n        return len(s) % 2 == 0\n",
        0,
    ),
    ("leetcode list node result right", REVERSE_LIST, REVERSE_RIGHT, 1),
    ("leetcode list node result wrong", REVERSE_LIST, REVERSE_RIGHT.replace("return prev", "return head"), 0),
    ("leetcode list changed in place right", REORDER_LIST, REORDER_RIGHT, 1),
    (
        "leetcode list left as it was",
        REORDER_LIST,
        "class Solution:\n    def reorderList(self, head):\n        return None\n",
        0,
    ),
    ("leetcode cycle sent as a cycle", HAS_CYCLE, CYCLE_RIGHT, 1),
    (
        "leetcode cycle wrong",
        HAS_CYCLE,
        "class Solution:\n    def hasCycle(self, head):\n        return head is not None\n",
        0,
    ),
    ("leetcode tree right", INVERT_TREE, INVERT_RIGHT, 1),
    (
        "leetcode tree returned unchanged",
        INVERT_TREE,
        "class Solution:\n    def invertTree(self, root):\n        return root\n",
        0,
    ),
    (
        "leetcode node that equals everything",
        REVERSE_LIST,
        "class Solution:\n    def reverseList(self, head):\n        class Any:\n"
        "            def __eq__(self, other):\n                return True\n"
        "        node = ListNode(Any())\n        node.next = node\n        return node\n",
        0,
    ),
    (
        "intellect2 string result right",
        INTELLECT2_STRING,
        "def to_json_list(n):\n    return str(list(range(1, n + 1)))\n",
        1,
    ),
    (
        "intellect2 string result as a list",
        INTELLECT2_STRING,
        "def to_json_list(n):\n    return list(range(1, n + 1))\n",
        0,
    ),
    (
        "intellect2 float within tolerance, list kept",
        INTELLECT2_FLOAT_AND_LIST,
        "def third(x):\n    return x / 3\ndef singleton(x):\n    return [x]\n",
        1,
    ),
    (
        "intellect2 element for its one-element list",
        INTELLECT2_FLOAT_AND_LIST,
        "def third(x):\n    return x / 3\ndef singleton(x):\n    return x\n",
        0,
    ),
    (
        "mutation right",
        MUTATION,
        "def rotate(lst, k):\n    k %= len(lst)\n    lst[:] = lst[-k:] + lst[:-k]\ndef total(lst):\n    return sum(lst)\n",
        1,
    ),
    (
        "mutation returns instead of rotating in place",
        MUTATION,
        "def rotate(lst, k):\n    return lst[-k:] + lst[:-k]\ndef total(lst):\n    return sum(lst)\n",
        0,
    ),
    (
        "mutation empties the caller's list",
        MUTATION,
        "def rotate(lst, k):\n    lst[:] = lst[-k:] + lst[:-k]\ndef total(lst):\n    s = sum(lst)\n"
        "    lst.clear()\n    return s\n",
        0,
    ),
    ("checker any valid pair", CHECKER, "n = int(input())\nprint(f'1 {n - 1}' if n > 1 else 'no')\n", 1),
    ("checker wrong pair", CHECKER, "n = int(input())\nprint(f'1 {n}' if n > 1 else 'NO')\n", 0),
    ("tolerance 1e-4 right", TOLERANCE, "print(f'{2 ** 0.5:.5f}')\n", 1),
    ("tolerance 1e-4 wrong", TOLERANCE, "print('1.4')\n", 0),
    ("rich values right", RICH, RICH_RIGHT, 1),
    ("rich values list for generator", RICH, RICH_RIGHT.replace("yield i * i", "yield i"), 0),
]
for index, cheat in enumerate(WRONG_EXITS):
    CASES.append((f"kodcode exit cheat {index}", KODCODE_PALINDROME, cheat, 0))
    CASES.append((f"unittest exit cheat {index}", UNITTEST_BARE_MAIN, cheat, 0))
    CASES.append((f"lcb functional exit cheat {index}", LCB_FUNCTIONAL, cheat, 0))
    CASES.append((f"mbpp exit cheat {index}", MBPP_FULL, cheat, 0))

# Rows each dataset's own harness cannot run as given: a one-line refusal at load, naming what is missing.
REFUSED_ROWS = [
    ("codecontests file io", {**CODE_CONTESTS, "input_file": "input.txt"}, "input_file"),
    (
        "lcb unknown testtype",
        {
            **LCB_STDIN,
            "public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "interactive"}]),
        },
        "testtype",
    ),
    ("lcb functional without func_name", {**LCB_FUNCTIONAL, "metadata": "{}"}, "func_name"),
    (
        "apps unwrapped call output",
        {**APPS_CALL, "input_output": json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [2]})},
        "outputs",
    ),
    ("apps empty tests", {**APPS_STDIN, "input_output": ""}, "input_output"),
    (
        "unknown verification field",
        {
            "prompt": "p",
            "task_type": "code",
            "verification_info": {"test": "assert f(1) == 1", "tolerance": 1},
        },
        "tolerance",
    ),
    (
        "unknown test case field",
        {
            "prompt": "p",
            "task_type": "code",
            "verification_info": {
                "test_cases": [{"type": "stdin_stdout", "input": "", "output": "", "x": 1}]
            },
        },
        "'x'",
    ),
    (
        "unknown test case type",
        {
            "prompt": "p",
            "task_type": "code",
            "verification_info": {"test_cases": [{"type": "special", "input": "", "output": ""}]},
        },
        "special",
    ),
    (
        "not python",
        {"prompt": "p", "task_type": "code", "verification_info": {"language": "cpp", "test_cases": []}},
        "language",
    ),
    (
        "check without entry point",
        {
            "prompt": "p",
            "task_type": "code",
            "verification_info": {"test": "def check(candidate):\n    assert candidate(1)\n"},
        },
        "entry_point",
    ),
    (
        "tests import a module that is not there",
        {
            "prompt": "p",
            "task_type": "code",
            "verification_info": {"test": "from my_solution import f\n\ndef test_f():\n    assert f()\n"},
        },
        "my_solution",
    ),
    (
        "math unknown field",
        {"prompt": "p", "task_type": "math", "verification_info": {"ground_truth": "1", "tolerance": 0.1}},
        "tolerance",
    ),
]
