"""Safe arithmetic formulas for task.yaml (shapes, FLOPs, bytes, workspace sizes).

Only numbers, dimension names, + - * / // % **, parentheses, comparisons, a conditional
expression and a few functions (min, max, ceil, floor, log2, abs) are allowed.  Nothing is
``eval``-ed: the expression is parsed with ``ast`` and walked.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Callable, Mapping

Number = int | float

_BINARY: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Number, Number], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "min": min, "max": max, "abs": abs, "ceil": math.ceil, "floor": math.floor,
    "log2": math.log2, "sqrt": math.sqrt,
}


class FormulaError(ValueError):
    """A formula that does not parse, uses something not allowed, or names an unknown dim."""


class Formula:
    """A parsed formula; ``names`` are the dimension names it reads."""

    def __init__(self, text: str | int | float) -> None:
        self.text = str(text)
        try:
            self._tree = ast.parse(self.text, mode="eval").body
        except SyntaxError as exc:
            raise FormulaError(f"cannot parse {self.text!r}: {exc.msg}") from None
        self.names = frozenset(self._check(self._tree))

    def _check(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return set()
        if isinstance(node, ast.Name):
            return {node.id}
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._check(node.left) | self._check(node.right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._check(node.operand)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            names = self._check(node.left)
            for comp in node.comparators:
                names |= self._check(comp)
            return names
        if isinstance(node, ast.IfExp):
            return self._check(node.test) | self._check(node.body) | self._check(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _FUNCTIONS and not node.keywords:
            names: set[str] = set()
            for arg in node.args:
                names |= self._check(arg)
            return names
        raise FormulaError(f"{self.text!r}: '{ast.unparse(node)}' is not allowed in a formula")

    def __call__(self, env: Mapping[str, Number]) -> Number:
        return self._eval(self._tree, env)

    def _eval(self, node: ast.AST, env: Mapping[str, Number]) -> Number:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise FormulaError(f"{self.text!r}: unknown name {node.id!r}")
            return env[node.id]
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, env), self._eval(node.right, env))
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            for op, comp in zip(node.ops, node.comparators):
                right = self._eval(comp, env)
                if not _COMPARE[type(op)](left, right):
                    return 0
                left = right
            return 1
        if isinstance(node, ast.IfExp):
            return self._eval(node.body, env) if self._eval(node.test, env) else self._eval(node.orelse, env)
        if isinstance(node, ast.Call):
            return _FUNCTIONS[node.func.id](*(self._eval(a, env) for a in node.args))  # type: ignore[attr-defined]
        raise FormulaError(f"{self.text!r}: cannot evaluate")  # unreachable after _check

    def __repr__(self) -> str:
        return f"Formula({self.text!r})"
