"""The admission report of a pack: each named check with its figures and limits, and the verdict.

Plain pydantic models: what `swarmrl tasks check --json` prints and what a validator will send the coordinator
(phase 2), so the author sees exactly why a pack was refused.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

CheckName = Literal["loads", "leaking", "solvable", "hackable", "useful"]
# The order checks run in: cheapest first (the verifier's sandbox passes serve loads, solvable and hackable).
CHECK_ORDER: tuple[CheckName, ...] = ("loads", "leaking", "solvable", "hackable", "useful")
Status = Literal["pass", "fail", "pending", "skipped"]


class Figure(BaseModel):
    name: str
    value: float
    limit: float | None = None
    bound: Literal["min", "max"] | None = Field(
        None, description="value must be >= limit (min) or <= it (max)"
    )

    @property
    def ok(self) -> bool:
        if self.limit is None or self.bound is None:
            return True
        return self.value >= self.limit if self.bound == "min" else self.value <= self.limit

    def text(self) -> str:
        if self.limit is None or self.bound is None:
            return f"{self.name} {_number(self.value)}"
        sign = ">=" if self.bound == "min" else "<="
        mark = "" if self.ok else "  FAIL"
        return f"{self.name} {_number(self.value)} ({sign} {_number(self.limit)}){mark}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


class CheckResult(BaseModel):
    name: CheckName
    status: Status
    summary: str
    figures: list[Figure] = Field(default_factory=list)
    details: dict[str, list[str]] = Field(default_factory=dict, description="examples behind the figures")
    seconds: float = 0.0

    @classmethod
    def from_figures(
        cls, name: CheckName, summary: str, figures: list[Figure], details: dict[str, list[str]] | None = None
    ) -> CheckResult:
        status: Status = "pass" if all(figure.ok for figure in figures) else "fail"
        return cls(name=name, status=status, summary=summary, figures=figures, details=details or {})


class AdmissionReport(BaseModel):
    pack: str | None = Field(None, description="name@version, once the manifest is read")
    author: str | None = None
    digest: str | None = Field(None, description="the signed content digest: the pack's id")
    rows: int = 0
    verdict: Literal["admitted", "refused", "pending"]
    refused_by: CheckName | None = None
    checks: list[CheckResult]
    seconds: float

    def check(self, name: CheckName) -> CheckResult:
        return next(check for check in self.checks if check.name == name)


def verdict_of(
    checks: list[CheckResult],
) -> tuple[Literal["admitted", "refused", "pending"], CheckName | None]:
    """Refused by the first failed check in running order; admitted when all passed; pending otherwise."""
    by_name = {check.name: check for check in checks}
    for name in CHECK_ORDER:
        if name in by_name and by_name[name].status == "fail":
            return "refused", name
    if all(by_name.get(name) is not None and by_name[name].status == "pass" for name in CHECK_ORDER):
        return "admitted", None
    return "pending", None


def _shown(figures: list[Figure], most: int = 5) -> list[Figure]:
    """Every figure of a check with a few; of a long list, the failed ones (or the first few)."""
    if len(figures) <= most:
        return figures
    failed = [figure for figure in figures if not figure.ok]
    return failed or figures[:3]


def render(report: AdmissionReport) -> str:
    """The report as a person reads it: one line per check, its figures under it, then the verdict."""
    head = report.pack or "task pack (unreadable)"
    lines = [
        f"{head}  rows {report.rows}"
        + (
            f"  author {report.author[:16]}…  id {report.digest[:16]}…"
            if report.author and report.digest
            else ""
        )
    ]
    for check in sorted(report.checks, key=lambda c: CHECK_ORDER.index(c.name)):
        lines.append(f"  {check.name:<9} {check.status:<8} {check.summary}")
        lines += [f"      {figure.text()}" for figure in _shown(check.figures)]
        for label, examples in check.details.items():
            lines.append(f"      {label}: {'; '.join(examples)}")
    verdicts = {
        "admitted": "admitted: every check passed",
        "refused": f"refused by {report.refused_by}",
        "pending": "passes every check run here; pending: "
        + ", ".join(c.name for c in report.checks if c.status in ("pending", "skipped")),
    }
    lines.append(f"verdict: {verdicts[report.verdict]}  ({report.seconds:.2f} s)")
    return "\n".join(lines)
