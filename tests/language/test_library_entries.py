"""Every entry of the shipped expression library (expressions/*.toml), checked three ways:

1. its body, built with torch in float64 over its domain, equals a reference computed
   directly in torch (torch.nn.functional where torch has the function, else the formula);
2. torch autograd through the body equals the published closed-form `derivative`, the
   reference's own autograd, and sympy's derivative of the body;
3. torch's value equals sympy's exact value at sample points.

Plus: the metadata is complete, bodies stay finite (values and gradients) far outside the
domain, and calls through the language (`mish(x)`, `softplus(x, beta=2.0)`) agree.
Only the built-in folder is loaded, so $GRADCLI_LIBRARY cannot change what is tested.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import pytest
import sympy
import torch
import torch.nn.functional as F

from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.language.ops import OPS
from gradcli.language.parser import parse
from gradcli.language.library import builtin_folder, load_library

LIB = load_library((builtin_folder(),))
NAMES = sorted(LIB.functions)
DTYPE = torch.float64

# Explicit tolerances (float64 throughout).
VALUE_RTOL, VALUE_ATOL = 1e-10, 1e-12
GRAD_RTOL, GRAD_ATOL = 1e-9, 1e-12
SYMPY_RTOL, SYMPY_ATOL = 1e-10, 1e-12
GRID = 401  # points over each domain
SYMPY_POINTS = 11  # sympy is slow: fewer points
KINK_GAP = 1e-6  # points this close to a kink are left out of derivative comparisons

# The entries that must be here (the brief), so a deleted entry fails loudly.
REQUIRED = {
    "swish", "silu", "mish", "gelu", "gelu_tanh", "softplus", "elu", "selu", "celu", "softsign",
    "lisht", "logsigmoid", "gaussian", "bent_identity", "log_cosh", "smooth_l1", "hardswish",
}
# Entries whose source (or the reference table it cites) publishes d/dx.
WITH_DERIVATIVE = {
    "swish", "silu", "mish", "gelu", "softplus", "logsigmoid", "elu", "celu", "softsign", "lisht",
    "gaussian", "bent_identity", "log_cosh", "smooth_l1", "huber", "squareplus",
}


def _zeros(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)


#: name -> reference computed directly in torch, called with (x, **params).
REFERENCES: dict[str, Callable[..., torch.Tensor]] = {
    "swish": lambda x, beta: x * torch.sigmoid(beta * x),
    "silu": lambda x: F.silu(x),
    "mish": lambda x: F.mish(x),
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softplus": lambda x, beta, threshold: F.softplus(x, beta=beta, threshold=threshold),
    "logsigmoid": lambda x: F.logsigmoid(x),
    "elu": lambda x, alpha: F.elu(x, alpha=alpha),
    "selu": lambda x: F.selu(x),
    "celu": lambda x, alpha: F.celu(x, alpha=alpha),
    "softsign": lambda x: F.softsign(x),
    "lisht": lambda x: x * torch.tanh(x),
    "gaussian": lambda x: torch.exp(-x * x),
    "bent_identity": lambda x: (torch.sqrt(x * x + 1) - 1) / 2 + x,
    "hardswish": lambda x: F.hardswish(x),
    "hardsigmoid": lambda x: F.hardsigmoid(x),
    "leaky_relu": lambda x, negative_slope: F.leaky_relu(x, negative_slope=negative_slope),
    "tanhshrink": lambda x: F.tanhshrink(x),
    "squareplus": lambda x, b: (x + torch.sqrt(x * x + b)) / 2,
    "snake": lambda x, a: x + torch.sin(a * x) ** 2 / a,
    "smooth_l1": lambda x, beta: F.smooth_l1_loss(x, _zeros(x), reduction="none", beta=beta),
    "huber": lambda x, delta: F.huber_loss(x, _zeros(x), reduction="none", delta=delta),
    "log_cosh": lambda x: torch.log(torch.cosh(x)),
}

#: Non-default parameter values to check besides the defaults.
EXTRA_PARAMS: dict[str, list[dict[str, float]]] = {
    "swish": [{"beta": 1.5}, {"beta": 0.25}],
    "softplus": [{"beta": 2.0, "threshold": 5.0}, {"beta": 0.5, "threshold": 20.0}],
    "elu": [{"alpha": 0.5}, {"alpha": 2.0}],
    "celu": [{"alpha": 0.5}, {"alpha": 2.0}],
    "leaky_relu": [{"negative_slope": 0.2}],
    "smooth_l1": [{"beta": 0.5}, {"beta": 2.0}],
    "huber": [{"delta": 0.5}, {"delta": 2.0}],
    "squareplus": [{"b": 1.0}, {"b": 0.25}],
    "snake": [{"a": 2.0}, {"a": 0.5}],
}


def _defaults(name: str) -> dict[str, Any]:
    return {p.name: p.default for p in LIB[name].params if not p.required}


def _cases() -> list[Any]:
    cases = []
    for name in NAMES:
        settings = [_defaults(name)] + [{**_defaults(name), **extra} for extra in EXTRA_PARAMS.get(name, [])]
        for params in settings:
            label = name + "".join(f"-{k}={v:g}" for k, v in params.items() if params != _defaults(name))
            cases.append(pytest.param(name, params, id=label))
    return cases


CASES = _cases()


def _grid(name: str, n: int = GRID, *, avoid_kinks: bool = False) -> torch.Tensor:
    function = LIB[name]
    lo, hi = function.domain
    x = torch.linspace(lo, hi, n, dtype=DTYPE)
    # Some points near 0 too, where cancellation would show.
    x = torch.cat([x, torch.tensor([-1e-3, -1e-7, 1e-7, 1e-3], dtype=DTYPE)])
    if avoid_kinks:
        for kink in function.kinks:
            x = x[(x - kink).abs() > KINK_GAP]
    return x


def _body(name: str, x: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """The entry's own body (not the built-in, for softplus/logsigmoid), built with torch."""
    out = build(LIB[name].body, {"x": x, **params}, library=LIB).output
    assert isinstance(out, torch.Tensor) and out.dtype == DTYPE and out.shape == x.shape
    return out


def _autograd(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    leaf = x.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(leaf).sum(), leaf)
    return grad


def _published_region(name: str, x: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Where the published d/dx describes the function torch computes."""
    if name == "softplus":  # torch is exactly linear (slope 1) beyond its threshold
        return params["beta"] * x <= params["threshold"]
    return torch.ones_like(x, dtype=torch.bool)


# -- metadata --------------------------------------------------------------------------------


def test_required_entries_present():
    assert REQUIRED <= set(NAMES)


def test_every_entry_has_a_reference_here():
    # A new entry must come with a torch reference in this file.
    assert set(NAMES) == set(REFERENCES)


def test_published_derivatives_present():
    assert {name for name in NAMES if LIB[name].derivative is not None} == WITH_DERIVATIVE


@pytest.mark.parametrize("name", NAMES)
def test_metadata(name):
    f = LIB[name]
    assert f.doc and "\n" not in f.doc and len(f.doc) <= 120
    assert f.source and "\n" not in f.source
    assert f.link and f.link.startswith("https://")
    if not f.source.startswith("Standard function"):
        assert re.search(r"\b(19|20)\d\d\b", f.source), "a paper source names its year"
    # An arXiv id in the source must be real-looking, and an arXiv link must be one of them.
    ids = re.findall(r"arXiv:(\d{4}\.\d{4,5})", f.source)
    if "arxiv.org" in f.link:
        assert f.link.rsplit("/", 1)[-1] in ids
    lo, hi = f.domain
    assert all(math.isfinite(v) for v in f.domain) and lo < hi
    assert all(lo < k < hi for k in f.kinks)
    # Bodies use only their own parameters (the loader enforces it; checked for clarity).
    assert set(f.body.variables) <= {p.name for p in f.params}


@pytest.mark.parametrize("name", [n for n in NAMES if n in OPS])
def test_builtin_entries_call_the_operation(name):
    from gradcli.language.library import calls

    assert LIB[name].builtin
    assert name in calls(LIB[name].body)


# -- torch value against the direct torch reference -------------------------------------------


@pytest.mark.parametrize("name, params", CASES)
def test_value_matches_torch_reference(name, params):
    x = _grid(name)
    ours = _body(name, x, params)
    reference = REFERENCES[name](x, **params)
    torch.testing.assert_close(ours, reference, rtol=VALUE_RTOL, atol=VALUE_ATOL)


def test_swish_beta_one_is_torch_silu():
    x = _grid("swish")
    torch.testing.assert_close(_body("swish", x, {"beta": 1.0}), F.silu(x), rtol=VALUE_RTOL, atol=VALUE_ATOL)


def test_softplus_above_torch_threshold_20_is_within_2e_9():
    # The body applies `threshold` itself around softplus(beta*x) (whose own threshold is 20):
    # for threshold > 20 it is linear from beta*x = 20 on, torch only from `threshold` on.
    x = torch.linspace(0, 40, 401, dtype=DTYPE)
    params = {"beta": 1.0, "threshold": 30.0}
    torch.testing.assert_close(_body("softplus", x, params), F.softplus(x, 1.0, 30.0), rtol=0, atol=2.1e-9)


# -- gradients --------------------------------------------------------------------------------


#: torch's hardsigmoid backward multiplies by 1/6 rounded to float32 (0.16666667163...), even
#: in float64, so its gradient is off by 3e-8 relative; the body's exact 1/6 is checked below.
REFERENCE_GRAD_RTOL = {"hardsigmoid": 1e-7}


@pytest.mark.parametrize("name, params", CASES)
def test_autograd_matches_reference_autograd(name, params):
    x = _grid(name, avoid_kinks=True)
    ours = _autograd(lambda t: _body(name, t, params), x)
    reference = _autograd(lambda t: REFERENCES[name](t, **params), x)
    rtol = REFERENCE_GRAD_RTOL.get(name, GRAD_RTOL)
    torch.testing.assert_close(ours, reference, rtol=rtol, atol=GRAD_ATOL)


def test_hardsigmoid_slope_is_exactly_one_sixth():
    x = torch.linspace(-2.9, 2.9, 59, dtype=DTYPE)
    grad = _autograd(lambda t: _body("hardsigmoid", t, {}), x)
    assert (grad == 1 / 6).all()


@pytest.mark.parametrize("name, params", [c for c in CASES if LIB[c.values[0]].derivative is not None])
def test_autograd_matches_published_derivative(name, params):
    x = _grid(name, avoid_kinks=True)
    x = x[_published_region(name, x, params)]
    grad = _autograd(lambda t: _body(name, t, params), x)
    published = build(LIB[name].derivative, {"x": x, **params}, library=LIB).output
    published = torch.as_tensor(published, dtype=DTYPE).expand_as(x)
    torch.testing.assert_close(grad, published, rtol=GRAD_RTOL, atol=GRAD_ATOL)


@pytest.mark.parametrize("name, params", [c for c in CASES if LIB[c.values[0]].kinks])
def test_gradient_at_kinks_is_the_one_torch_uses(name, params):
    # At a kink any one-sided slope is defensible; the body picks the one torch's kernel does.
    x = torch.tensor(LIB[name].kinks, dtype=DTYPE)
    ours = _autograd(lambda t: _body(name, t, params), x)
    reference = _autograd(lambda t: REFERENCES[name](t, **params), x)
    rtol = REFERENCE_GRAD_RTOL.get(name, GRAD_RTOL)
    torch.testing.assert_close(ours, reference, rtol=rtol, atol=GRAD_ATOL)


@pytest.mark.parametrize(
    "name, params, slope",
    [("celu", {"alpha": 1.0}, 1.0), ("celu", {"alpha": 0.5}, 1.0), ("celu", {"alpha": 3.0}, 1.0),
     ("elu", {"alpha": 1.0}, 1.0), ("swish", {"beta": 1.0}, 0.5), ("mish", {}, 0.6),
     ("softsign", {}, 1.0), ("squareplus", {"b": 4.0}, 0.5), ("smooth_l1", {"beta": 1.0}, 0.0),
     ("log_cosh", {}, 0.0), ("gelu", {}, 0.5)],
)
def test_slope_at_zero_of_smooth_entries(name, params, slope):
    # x = 0 is where a clamp/relu-based body would silently report slope 0.
    grad = _autograd(lambda t: _body(name, t, params), torch.zeros(1, dtype=DTYPE))
    assert grad.item() == pytest.approx(slope, rel=1e-12, abs=1e-15)


# -- torch against sympy ----------------------------------------------------------------------

X = sympy.Symbol("x", real=True)


def _sympy_points(name: str) -> list[float]:
    lo, hi = LIB[name].domain
    points = torch.linspace(lo, hi, SYMPY_POINTS, dtype=DTYPE).tolist() + [0.3, -0.7]
    return [p for p in points if all(abs(p - k) > KINK_GAP for k in LIB[name].kinks)]


def _at(expr: Any, point: float) -> float:
    # The exact binary value of the float, so sympy sees the very input torch saw.
    value = sympy.N(expr.subs(X, sympy.Rational(point)), 30)
    return float(value)


@pytest.mark.parametrize("name, params", CASES)
def test_torch_value_and_gradient_match_sympy(name, params):
    expr = to_sympy(LIB[name].body, {"x": X, **params}, library=LIB)
    derivative = sympy.diff(expr, X)
    points = _sympy_points(name)
    x = torch.tensor(points, dtype=DTYPE)
    value = _body(name, x, params)
    grad = _autograd(lambda t: _body(name, t, params), x)
    exact_value = torch.tensor([_at(expr, p) for p in points], dtype=DTYPE)
    exact_grad = torch.tensor([_at(derivative, p) for p in points], dtype=DTYPE)
    torch.testing.assert_close(value, exact_value, rtol=SYMPY_RTOL, atol=SYMPY_ATOL)
    torch.testing.assert_close(grad, exact_grad, rtol=SYMPY_RTOL, atol=SYMPY_ATOL)


@pytest.mark.parametrize("name", sorted(WITH_DERIVATIVE))
def test_published_derivative_equals_sympy_derivative(name):
    params = _defaults(name)
    derivative = sympy.diff(to_sympy(LIB[name].body, {"x": X, **params}, library=LIB), X)
    published = to_sympy(LIB[name].derivative, {"x": X, **params}, library=LIB)
    for point in _sympy_points(name):
        assert _at(published, point) == pytest.approx(_at(derivative, point), rel=SYMPY_RTOL, abs=SYMPY_ATOL)


# -- numerical stability far outside the domain ------------------------------------------------

FAR = [
    -1e100, -1e10, -1e6, -1e3, -750.0, -710.0, -100.0, -40.0, -20.0, -1e-300, 0.0,
    1e-300, 20.0, 40.0, 100.0, 710.0, 750.0, 1e3, 1e6, 1e10, 1e100,
]
# x**3 overflows beyond |x| ~ 5e102; torch's own gelu(approximate='tanh') gives nan there too.
OVERFLOWS_PAST_1E102 = {"gelu_tanh"}


@pytest.mark.parametrize("name, params", CASES)
def test_finite_value_and_gradient_on_the_whole_line(name, params):
    x = torch.tensor(FAR, dtype=DTYPE)
    value = _body(name, x, params)
    grad = _autograd(lambda t: _body(name, t, params), x)
    assert torch.isfinite(value).all(), dict(zip(FAR, value.tolist()))
    assert torch.isfinite(grad).all(), dict(zip(FAR, grad.tolist()))


@pytest.mark.parametrize("name", NAMES)
def test_no_nan_at_the_ends_of_float64(name):
    x = torch.tensor([-1e300, -1e200, 1e200, 1e300], dtype=DTYPE)
    params = _defaults(name)
    value = _body(name, x, params)
    assert not torch.isnan(value).any()  # inf is allowed where x**2 overflows
    if name not in OVERFLOWS_PAST_1E102:
        assert not torch.isnan(_autograd(lambda t: _body(name, t, params), x)).any()


# -- calls through the language ---------------------------------------------------------------


@pytest.mark.parametrize("name, params", CASES)
def test_call_through_the_language(name, params):
    # `name(x, k=v)` in an expression: a library call, or the operation for built-in names.
    arguments = "".join(f", {k}={v!r}" for k, v in params.items())
    program = parse(f"{name}(x{arguments})", LIB.functions)
    x = _grid(name)
    out = build(program, {"x": x}, library=LIB).output
    reference = REFERENCES[name](x, **params)
    torch.testing.assert_close(out, reference, rtol=VALUE_RTOL, atol=VALUE_ATOL)
