"""A KernelBench problem file read without running it (no torch needed).

KernelBench format: a ``Model(nn.Module)`` class whose ``forward`` takes tensors, a
``get_inputs()`` returning the forward arguments and ``get_init_inputs()`` returning the
constructor arguments.  Static checks find what cannot be converted before torch runs it.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

#: Element-wise operations a naive seed is generated for: call name -> CUDA expression of ``v``.
UNARY = {
    "relu": "fmaxf(v, 0.0f)", "sigmoid": "1.0f / (1.0f + expf(-v))", "tanh": "tanhf(v)", "exp": "expf(v)",
    "abs": "fabsf(v)", "neg": "-v", "sqrt": "sqrtf(v)", "log": "logf(v)", "sin": "sinf(v)", "cos": "cosf(v)",
    "gelu": "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))", "silu": "v / (1.0f + expf(-v))",
    "elu": "v > 0.0f ? v : expm1f(v)", "softplus": "v > 20.0f ? v : log1pf(expf(v))",
    "hardtanh": "fminf(fmaxf(v, -1.0f), 1.0f)", "softsign": "v / (1.0f + fabsf(v))",
}
BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
BINARY_CALLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
MATMUL_CALLS = ("matmul", "mm")
NON_FLOAT_DTYPES = ("int", "long", "bool", "uint8", "int8", "int16", "int32", "int64", "short")
NON_FLOAT_MAKERS = ("randint", "randperm")


class ProblemError(ValueError):
    """A file that is not a KernelBench problem (one line: file and what is missing)."""


@dataclass(frozen=True)
class NaiveOp:
    """What the naive seed computes: ``unary`` (expr of v), ``binary`` (op), or ``matmul``."""

    kind: str
    expr: str = ""
    operands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Problem:
    path: Path
    task_name: str
    forward_params: tuple[str, ...]
    description: str
    issue: str | None                 # why it cannot be converted, found without running it
    naive: NaiveOp | None             # None: the seed is a placeholder


def task_name_for(path: Path, prefix: str = "kb_") -> str:
    """``19_ReLU.py`` -> ``kb_19_relu`` (a folder name and an identifier)."""
    stem = re.sub(r"[^0-9a-zA-Z]+", "_", path.stem).strip("_").lower() or "problem"
    return prefix + stem


def _call_name(node: ast.AST) -> str:
    """``torch.nn.functional.relu`` / ``F.relu`` / ``x.relu`` -> ``relu``; '' if not a call."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return ""


def _find(tree: ast.AST, kind: type, name: str) -> ast.AST | None:
    for node in getattr(tree, "body", []):
        if isinstance(node, kind) and getattr(node, "name", None) == name:
            return node
    return None


def parse_problem(path: Path | str, prefix: str = "kb_") -> Problem:
    """Read ``path``; raises ProblemError when it is not in KernelBench's format."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from None
    except SyntaxError as exc:
        raise ProblemError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None
    model = _find(tree, ast.ClassDef, "Model")
    if model is None:
        raise ProblemError(f"{path}: no `class Model(nn.Module)`")
    for function in ("get_inputs", "get_init_inputs"):
        if _find(tree, ast.FunctionDef, function) is None:
            raise ProblemError(f"{path}: no `def {function}()`")
    forward = _find(model, ast.FunctionDef, "forward")
    if forward is None:
        raise ProblemError(f"{path}: Model has no forward()")
    if forward.args.vararg is not None:
        raise ProblemError(f"{path}: Model.forward takes *args: the inputs cannot be named")
    params = tuple(a.arg for a in forward.args.args[1:])
    description = (ast.get_docstring(model) or ast.get_docstring(forward) or "").strip()
    return Problem(path=path, task_name=task_name_for(path, prefix), forward_params=params,
                   description=" ".join(description.split()),
                   issue=static_issue(tree, model, forward, params), naive=naive_op(forward, params))


def _root_name(node: ast.AST) -> str:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def static_issue(tree: ast.Module, model: ast.ClassDef, forward: ast.FunctionDef,
                 params: tuple[str, ...]) -> str | None:
    """Why the problem cannot be converted, when the source shows it; else None."""
    if not params:
        return "forward() takes no inputs"
    for node in ast.walk(forward):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List)):
            return f"several outputs (forward returns {len(node.value.elts)} values, line {node.lineno})"
        if isinstance(node, ast.AugAssign) and _root_name(node.target) in params:
            return f"in-place: forward modifies its input {_root_name(node.target)!r} (line {node.lineno})"
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and _root_name(t) in params
                                                for t in node.targets):
            return f"in-place: forward writes into its input (line {node.lineno})"
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name.endswith("_") and not name.startswith("_") and isinstance(node.func, ast.Attribute):
                return f"in-place: forward calls {name}() (line {node.lineno})"
            if any(kw.arg == "out" for kw in node.keywords):
                return f"in-place: forward writes through out= (line {node.lineno})"
    for node in ast.walk(model):
        if isinstance(node, ast.keyword) and node.arg == "inplace" and isinstance(node.value, ast.Constant) \
                and node.value.value is True:
            return "in-place: a layer has inplace=True"
    get_inputs = _find(tree, ast.FunctionDef, "get_inputs")
    for node in ast.walk(get_inputs):
        if isinstance(node, ast.Call) and _call_name(node) in NON_FLOAT_MAKERS:
            return f"non-float input: get_inputs() calls torch.{_call_name(node)} (line {node.lineno})"
        if isinstance(node, ast.keyword) and node.arg == "dtype" and isinstance(node.value, ast.Attribute) \
                and node.value.attr in NON_FLOAT_DTYPES:
            return f"non-float input: get_inputs() makes dtype=torch.{node.value.attr} (line {node.value.lineno})"
    return None


def naive_op(forward: ast.FunctionDef, params: tuple[str, ...]) -> NaiveOp | None:
    """The operation when forward is one ``return`` of a recognised op on its inputs."""
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    expr = body[0].value

    def names(nodes: list[ast.expr]) -> tuple[str, ...]:
        return tuple(n.id for n in nodes if isinstance(n, ast.Name) and n.id in params)

    if isinstance(expr, ast.Call):
        name = _call_name(expr)
        args = list(expr.args)
        if isinstance(expr.func, ast.Attribute) and isinstance(expr.func.value, ast.Name) \
                and expr.func.value.id in params:      # x.relu(), A.matmul(B)
            args = [expr.func.value, *args]
        operands = names(args)
        if len(operands) != len(args) or expr.keywords:
            return None
        if name in UNARY and len(operands) == 1:
            return NaiveOp("unary", UNARY[name], operands)
        if name in BINARY_CALLS and len(operands) == 2:
            return NaiveOp("binary", BINARY_CALLS[name], operands)
        if name in MATMUL_CALLS and len(operands) == 2:
            return NaiveOp("matmul", "", operands)
        return None
    if isinstance(expr, ast.BinOp):
        operands = names([expr.left, expr.right])
        if len(operands) == 2:
            if type(expr.op) in BINARY:
                return NaiveOp("binary", BINARY[type(expr.op)], operands)
            if isinstance(expr.op, ast.MatMult):
                return NaiveOp("matmul", "", operands)
    return None
