"""The expression-library loader: folders, validation, cycles, and safety of bodies.

(The shipped entries themselves are tested in test_library_entries.py.)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import sympy
import torch

from gradcli.interpret.to_sympy import to_sympy
from gradcli.interpret.to_torch import build
from gradcli.errors import LibraryError
from gradcli.language.library import ENV_VAR, builtin_folder, default_library, library_folders, load_library
from gradcli.pipeline import load, prepare

ENTRY = '''[{name}]
signature = "{signature}"
body = "{body}"
doc = "a test function"
source = "the tests"
'''


def folder(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / f"lib{len(list(tmp_path.iterdir()))}"
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text, encoding="utf-8")
    return path


def entry(name: str = "double", signature: str | None = None, body: str = "2 * x", extra: str = "") -> str:
    return ENTRY.format(name=name, signature=signature or f"{name}(x)", body=body) + extra


def refusal(tmp_path: Path, files: dict[str, str]) -> LibraryError:
    with pytest.raises(LibraryError) as info:
        load_library((folder(tmp_path, files),))
    return info.value


def test_a_user_folder_adds_callable_functions(tmp_path):
    lib_dir = folder(tmp_path, {"mine.toml": entry("scaled", "scaled(x, a=3)", "a * x + swish(x)")})
    program, library = load("scaled(x, a=0.5).sum()", [lib_dir])
    assert "scaled" in library and "swish" in library  # the built-ins stay
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    out = build(program, {"x": x}, library=library).output
    expected = (0.5 * x + x * torch.sigmoid(x)).sum()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    symbol = sympy.Symbol("x")
    single = load("scaled(x)", [lib_dir])
    assert to_sympy(single[0], {"x": symbol}, library=single[1]) == 3 * symbol + symbol / (1 + sympy.exp(-symbol))
    function = library["scaled"]
    assert function.signature() == "scaled(x, a=3)"
    assert function.doc == "a test function" and function.path == lib_dir / "mine.toml"


def test_the_environment_variable_adds_folders(tmp_path, monkeypatch):
    first = folder(tmp_path, {"a.toml": entry("triple", body="3 * x")})
    second = folder(tmp_path, {"b.toml": entry("quadruple", body="4 * x")})
    monkeypatch.setenv(ENV_VAR, f"{first}{__import__('os').pathsep}{second}")
    assert library_folders() == (builtin_folder(), first, second)
    library = default_library()
    assert {"triple", "quadruple", "swish"} <= set(library.functions)
    prepared = prepare("triple(x) + quadruple(y)", ["x=1", "y=2"], seed=0)
    x, y = prepared.leaves.tensors["x"], prepared.leaves.tensors["y"]
    from gradcli.pipeline import build_prepared

    assert build_prepared(prepared).output.item() == 3 * x.item() + 4 * y.item() == 11.0


def test_builtin_folder_ships_the_library():
    folder_ = builtin_folder()
    assert folder_.is_dir() and sorted(p.name for p in folder_.glob("*.toml"))
    assert len(default_library().functions) >= 15


def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(LibraryError) as info:
        load_library((tmp_path / "nope",))
    assert "does not exist" in info.value.message


def test_duplicate_names_are_refused_within_and_across_folders(tmp_path):
    err = refusal(tmp_path, {"a.toml": entry("f"), "b.toml": entry("f")})
    assert "'f' is already defined in" in err.message and "a.toml" in err.message
    user = folder(tmp_path, {"mine.toml": entry("swish", "swish(x, beta=1.0)", "x * sigmoid(beta * x)")})
    with pytest.raises(LibraryError) as info:
        load_library(library_folders([user]))
    assert "'swish' is already defined in" in info.value.message
    assert info.value.hint == "give your function another name"


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        ({"a.toml": entry("f", body="f(x) + 1")}, "f -> f"),
        ({"a.toml": entry("f", body="g(x)") + entry("g", body="f(x)")}, "f -> g -> f"),
        ({"a.toml": entry("f", body="g(x)"), "b.toml": entry("g", body="h(x) * 2") + entry("h", body="f(x)")}, "f -> g -> h -> f"),
    ],
)
def test_cycles_are_refused(tmp_path, files, cycle):
    err = refusal(tmp_path, files)
    assert err.message == f"the library functions call each other in a cycle: {cycle}"


def test_entries_may_call_entries_defined_later_or_elsewhere(tmp_path):
    lib_dir = folder(tmp_path, {"a.toml": entry("f", body="g(x) + 1"), "b.toml": entry("g", body="x * x")})
    library = load_library((lib_dir,))
    assert "f" not in default_library()
    from gradcli.language.parser import parse

    out = build(parse("f(x)", library.functions), {"x": torch.tensor(3.0, dtype=torch.float64)}, library=library)
    assert out.output.item() == 10.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[f\nsignature=", "not valid TOML"),
        ("f = 1\n", "'f' must be a table ([f])"),
        (entry("f", body="x * b"), "[f] body is invalid: error: unknown name 'b'"),
        (entry("f", body="x.__class__"), "attribute access is not part of the language"),
        (entry("f", body="__import__('os').system('touch MARKER')"), "[f] body is invalid"),
        (entry("f", body="lambda: x"), "lambdas are not part of the language"),
        (entry("f", body="x.data"), "attribute access is not part of the language"),
        (entry("f", body="sigmod(x)"), "did you mean 'sigmoid'?"),
        (entry("f", body="exp(x, 1)"), "exp() takes at most 1 argument (2 given)"),
        (entry("f", extra='derivative = "y"\n'), "[f] derivative is invalid"),
        (entry("f", extra="colour = 1\n"), "[f] has unknown keys: colour"),
        ('[f]\nsignature = "f(x)"\nbody = "x"\ndoc = "d"\n', "[f] needs 'source' (a string)"),
        ('[f]\nsignature = "f(x)"\nbody = 3\ndoc = "d"\nsource = "s"\n', "[f] needs 'body' (a string)"),
        (entry("f", signature="g(x)"), "signature must be a call of 'f'"),
        (entry("f", signature="f(x,"), "is not of the form name(x, a=1.0)"),
        (entry("f", signature="f(x, a=b)"), "a parameter with a default is name=number"),
        (entry("f", signature="f(x, a=True)"), "a parameter with a default is name=number"),
        (entry("f", signature="f(x, a=1e400)"), "must be a finite number"),
        (entry("f", signature="f(x, a=" + "9" * 400 + ")"), "must be a finite number"),
        (entry("f", signature="f(x, x=2)"), "each named once"),
        (entry("f", signature="f()"), "needs at least one parameter"),
        (entry("f", signature="f(*x)"), "positional parameters are plain names"),
        (entry("f", signature="f(_x)", body="_x"), "may not start with '_'"),
        (entry("f", signature="f(pi)", body="pi"), "may not start with '_' or be pi or e"),
        (entry("__f"), "'__f' cannot be a function name"),
        (entry("pi"), "'pi' cannot be a function name"),
        (entry("lambda"), "cannot be a function name"),
        (entry("f", extra="domain = [1, 0]\n"), "domain must be [low, high]"),
        (entry("f", extra="domain = [true, 2]\n"), "domain must be [low, high]"),
        (entry("f", extra="domain = [-inf, 1]\n"), "domain must be [low, high]"),
        (entry("f", extra='domain = "wide"\n'), "domain must be [low, high]"),
        (entry("f", extra="kinks = [true]\n"), "kinks must be a list of finite numbers"),
        (entry("f", extra="link = 3\n"), "link must be a string"),
        (entry("exp", body="x"), "shares its name with the built-in operation, so its body must call it"),
    ],
)
def test_malformed_entries_are_refused(tmp_path, text, message):
    text = text.replace("MARKER", str(tmp_path / "marker"))
    err = refusal(tmp_path, {"bad.toml": text})
    assert message in err.message
    assert "bad.toml" in err.message
    assert not (tmp_path / "marker").exists()


def test_an_unreadable_toml_is_a_library_error(tmp_path):
    lib_dir = folder(tmp_path, {})
    (lib_dir / "dir.toml").mkdir()
    with pytest.raises(LibraryError) as info:
        load_library((lib_dir,))
    assert "dir.toml: cannot be read" in info.value.message


def test_non_utf8_toml_is_a_library_error(tmp_path):
    lib_dir = folder(tmp_path, {})
    (lib_dir / "latin.toml").write_bytes(b'[f]\ndoc = "caf\xe9"\n')
    with pytest.raises(LibraryError) as info:
        load_library((lib_dir,))
    assert "not valid TOML" in info.value.message


def test_entries_named_like_operations_document_them_and_calls_go_to_the_operation(tmp_path):
    lib_dir = folder(tmp_path, {"ops.toml": entry("exp", body="exp(x)", extra="domain = [-2.0, 2.0]\n")})
    library = load_library((lib_dir,))
    assert library["exp"].builtin and library["exp"].domain == (-2.0, 2.0)
    from gradcli.language.parser import parse

    program = parse("exp(x)", library.functions)
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    built = build(program, {"x": x}, library=library)
    assert built.output.grad_fn.name() == "ExpBackward0"
    assert built.output.item() == pytest.approx(math.exp(0.5), rel=1e-15)


def test_a_library_body_may_use_only_its_parameters_not_the_callers_variables(tmp_path):
    err = refusal(tmp_path, {"a.toml": entry("f", body="x * y")})
    assert "unknown name 'y'" in err.message
    assert "the names here are: x" in err.message
