from __future__ import annotations

import pytest

from evo_fsr.formulas import Formula, FormulaError


def test_arithmetic_and_functions() -> None:
    f = Formula("(H + 2*pad - R) // stride + 1")
    assert f({"H": 56, "pad": 1, "R": 3, "stride": 1}) == 56
    assert f.names == {"H", "pad", "R", "stride"}
    assert Formula("max(a, b) * ceil(c / 2)")({"a": 2, "b": 5, "c": 3}) == 10
    assert Formula("4 if R == 3 else 1")({"R": 3}) == 4
    assert Formula("log2(n)")({"n": 8}) == 3


@pytest.mark.parametrize("text", ["__import__('os')", "a.b", "[1, 2]", "lambda: 1", "open('x')", "a[0]", "'s'"])
def test_anything_but_arithmetic_is_refused(text: str) -> None:
    with pytest.raises(FormulaError):
        Formula(text)


def test_unknown_name_and_syntax_error() -> None:
    with pytest.raises(FormulaError, match="unknown name 'Z'"):
        Formula("Z + 1")({"A": 1})
    with pytest.raises(FormulaError, match="cannot parse"):
        Formula("1 +")
