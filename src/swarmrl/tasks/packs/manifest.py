"""manifest.toml: what a pack is, who made it, and how its rows are judged.

    format = 1
    name = "sort-letters"            # lower-case words joined by '-'
    version = "1.0.0"
    author = "<64 hex: the Ed25519 public key that signs the pack>"
    license = "CC-BY-4.0"            # an SPDX license expression
    task_type = "text"               # math | code | logic | text (code: the code cheats apply)
    description = "..."

    [verifier]
    kind = "reward_function"         # verifier.py defines `function(prompts, completions, **columns)`
    function = "reward"
    columns = ["answer"]             # the columns of prompts.jsonl it is handed, and the only ones allowed
    answer_columns = ["answer"]      # the columns holding a row's answer (the leak check looks for them)
    pass_score = 1.0                 # a completion solves its row when it scores at least this

or `kind = "code_tests"`: each row's `verification_info` holds test cases the trusted code judge runs
(stdin_stdout and function_call only: test *code* would run on the trusted side) and there is no verifier.py.
"""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swarmrl.identity import PUBLIC_KEY_HEX_LEN
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.reward_functions import RESERVED_COLUMNS

FORMAT = 1
CODE_TESTS_COLUMN = "verification_info"
# Columns a row carries for the pack itself, never handed to its verifier.
ROW_ID_COLUMN = "id"
_SPDX_ID = r"[A-Za-z0-9][A-Za-z0-9.+-]*"
_SPDX_EXPRESSION = re.compile(rf"\(?{_SPDX_ID}\)?(?: (?:AND|OR|WITH) \(?{_SPDX_ID}\)?)*")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RewardFunctionVerifier(_Strict):
    kind: Literal["reward_function"] = "reward_function"
    function: str = Field("reward", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    columns: list[str] = Field(default_factory=list)
    answer_columns: list[str]
    pass_score: float = Field(1.0, gt=0, le=1)

    @field_validator("columns")
    @classmethod
    def _columns_are_names(cls, columns: list[str]) -> list[str]:
        for column in columns:
            if not column.isidentifier():
                raise ValueError(f"column {column!r} is not a python identifier")
            if column in RESERVED_COLUMNS or column == ROW_ID_COLUMN:
                raise ValueError(f"column {column!r} is reserved (an argument or the row id of its own)")
        if len(set(columns)) != len(columns):
            raise ValueError("a column is named twice")
        return columns

    @model_validator(mode="after")
    def _answers_are_columns(self) -> RewardFunctionVerifier:
        stray = [column for column in self.answer_columns if column not in self.columns]
        if stray:
            raise ValueError(f"answer column {stray[0]!r} is not one of the verifier's columns")
        return self


class CodeTestsVerifier(_Strict):
    kind: Literal["code_tests"] = "code_tests"

    @property
    def columns(self) -> list[str]:
        return [CODE_TESTS_COLUMN]

    @property
    def pass_score(self) -> float:
        return 1.0


Verifier = Annotated[RewardFunctionVerifier | CodeTestsVerifier, Field(discriminator="kind")]


class Manifest(_Strict):
    format: Literal[1]
    name: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$", max_length=64)
    version: str = Field(pattern=r"^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$")
    author: str = Field(pattern=rf"^[0-9a-f]{{{PUBLIC_KEY_HEX_LEN}}}$")
    license: str = Field(max_length=128)
    task_type: Literal["math", "code", "logic", "text"]
    description: str = Field("", max_length=1000)
    verifier: Verifier

    @field_validator("license")
    @classmethod
    def _spdx(cls, value: str) -> str:
        if not _SPDX_EXPRESSION.fullmatch(value):
            raise ValueError("not an SPDX license expression (e.g. 'CC-BY-4.0', 'MIT OR Apache-2.0')")
        return value

    @model_validator(mode="after")
    def _code_tests_are_code(self) -> Manifest:
        if self.verifier.kind == "code_tests" and self.task_type != "code":
            raise ValueError("a code_tests verifier needs task_type = 'code'")
        return self

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


def parse_manifest(data: str, where: str) -> Manifest:
    """The manifest in `data`; PackError naming the field and the problem when it is not one."""
    try:
        raw = tomllib.loads(data)
    except tomllib.TOMLDecodeError as exc:
        raise PackError(f"{where}: not valid TOML ({exc})") from None
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise PackError(f"{where}: {_first_problem(exc)}") from None


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"] if not str(part).startswith("function-"))
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"{location} is missing"
    if error["type"] == "extra_forbidden":
        return f"{location} is not a manifest field"
    return f"{location}: {message}" if location else message
