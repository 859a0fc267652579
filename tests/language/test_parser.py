"""The parser: every construct of the language, spans and carets, and the allow-list.

Expected ASTs are written out node by node; positions are checked through the caret a
rendered error puts under the input, since that is what a user sees.
"""

from __future__ import annotations

import pytest

from gradcli.errors import ArgumentError, GradcliError, LimitError, ParseError, Span, UnknownNameError
from gradcli.language import nodes as n
from gradcli.pipeline import parse  # the parser with the expression library, as gradcli.parse


def out(text: str) -> n.Expr:
    return parse(text).output


def refused(text: str, kind: type[GradcliError] = GradcliError, **kwargs) -> GradcliError:
    with pytest.raises(kind) as info:
        parse(text, **kwargs)
    return info.value


def caret_column(rendered: str) -> int:
    """The 0-based column of the caret under the quoted input line (after 4 spaces)."""
    line = next(line for line in rendered.splitlines() if line.strip().startswith("^"))
    return line.index("^") - 4


x, y, h = n.Name("x"), n.Name("y"), n.Name("h")


# -- every construct -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2", n.Num(2)),
        ("0.5", n.Num(0.5)),
        ("1e-3", n.Num(0.001)),
        ("pi", n.Const("pi")),
        ("e", n.Const("e")),
        ("x + y", n.BinOp("+", x, y)),
        ("x - y", n.BinOp("-", x, y)),
        ("x * y", n.BinOp("*", x, y)),
        ("x / y", n.BinOp("/", x, y)),
        ("x ** y", n.BinOp("**", x, y)),
        ("x @ y", n.BinOp("@", x, y)),
        ("-x", n.UnaryOp("-", x)),
        ("+x", n.UnaryOp("+", x)),
        # precedence is Python's: ** binds tighter than unary minus, * tighter than +
        ("-x**2", n.UnaryOp("-", n.BinOp("**", x, n.Num(2)))),
        ("x + y * 2", n.BinOp("+", x, n.BinOp("*", y, n.Num(2)))),
        ("(x + y) * 2", n.BinOp("*", n.BinOp("+", x, y), n.Num(2))),
        ("x ** y ** 2", n.BinOp("**", x, n.BinOp("**", y, n.Num(2)))),
        ("exp(x)", n.Call("exp", (x,))),
        ("x.exp()", n.Call("exp", (x,), method=True)),
        ("x.pow(2).sum()", n.Call("sum", (n.Call("pow", (x, n.Num(2)), method=True),), method=True)),
        ("sum(x, dim=0)", n.Call("sum", (x,), (("dim", n.Num(0)),))),
        ("sum(x, dim=-1)", n.Call("sum", (x,), (("dim", n.UnaryOp("-", n.Num(1))),))),
        (
            "x.sum(dim=(0, 1), keepdim=True)",
            n.Call("sum", (x,), (("dim", n.Tuple((n.Num(0), n.Num(1)))), ("keepdim", n.Num(True))), method=True),
        ),
        ("mean(x, dim=[0])", n.Call("mean", (x,), (("dim", n.Tuple((n.Num(0),))),))),
        ("softmax(x, 0)", n.Call("softmax", (x, n.Num(0)))),
        ("clamp(x, min=0)", n.Call("clamp", (x,), (("min", n.Num(0)),))),
        (
            "where(x > 0, x, 0.1 * x)",
            n.Call("where", (n.Compare(">", x, n.Num(0)), x, n.BinOp("*", n.Num(0.1), x))),
        ),
        ("where(x >= y, 1, 2)", n.Call("where", (n.Compare(">=", x, y), n.Num(1), n.Num(2)))),
        ("where(x < y, 1, 2)", n.Call("where", (n.Compare("<", x, y), n.Num(1), n.Num(2)))),
        ("where(x <= y, 1, 2)", n.Call("where", (n.Compare("<=", x, y), n.Num(1), n.Num(2)))),
        ("swish(x, beta=1.5)", n.Call("swish", (x,), (("beta", n.Num(1.5)),))),
        ("mish(x).sum()", n.Call("sum", (n.Call("mish", (x,)),), method=True)),
        ("softplus(x, beta=2*pi)", n.Call("softplus", (x,), (("beta", n.BinOp("*", n.Num(2), n.Const("pi"))),))),
    ],
)
def test_each_construct_parses_to_its_node(text, expected):
    assert out(text) == expected


def test_statements_with_semicolons_and_newlines_build_assignments():
    expected = n.Program(
        (n.Assign("h", n.BinOp("+", n.BinOp("*", x, x), x)), n.Assign("h", n.BinOp("+", n.BinOp("*", h, h), h))),
        n.Call("sum", (h,), method=True),
        ("x",),
    )
    assert parse("h = x*x + x; h = h*h + h; h.sum()") == expected
    assert parse("h = x*x + x\nh = h*h + h\nh.sum()\n") == expected
    assert parse("h = x*x + x\r\nh = h*h + h\r\nh.sum()") == expected
    # comments and blank lines are fine
    assert parse("# square\nh = x*x + x\n\nh = h*h + h  # again\nh.sum()") == expected


def test_a_final_assignment_is_the_output_and_names_are_in_first_use_order():
    program = parse("a = y * x; b = a + z")
    assert program.output == n.Name("b")
    assert program.variables == ("y", "x", "z")
    # an intermediate is not a variable, even when it shadows nothing
    assert parse("h = x; h * h").variables == ("x",)


def test_equality_ignores_spans_and_spacing():
    assert parse("x+1") == parse("x  +  1")
    assert parse("x + 1").output.span == Span(1, 0, 1, 5)
    assert parse("  (x + 1)".strip()).output.span == Span(1, 1, 1, 6)
    assert n.Num(1, span=Span(1, 0, 1, 1)) == n.Num(1, span=Span(9, 9, 9, 9))
    assert parse("x + 1") != parse("x + 2")


def test_spans_of_nested_nodes():
    call = out("y + exp(x * 2)")
    assert call.span == Span(1, 0, 1, 14)
    assert call.right.span == Span(1, 4, 1, 14)
    assert call.right.args[0].span == Span(1, 8, 1, 13)
    program = parse("h = x\nh.pow(2)")
    assert program.statements[0].span == Span(1, 0, 1, 5)
    assert program.output.span == Span(2, 0, 2, 8)


# -- carets point at the right column --------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "column", "width"),
    [
        ("x + sigmod(x)", 4, 6),
        ("é + ñ + sigmod(x)", 8, 6),  # non-ASCII: columns are characters, not UTF-8 bytes
        ("αβγ * x + sigmod(x)", 10, 6),
        ("x * '字符串'", 4, 5),
        ("ééé + x +* 2", 9, 1),  # a syntax error after non-ASCII text
        ("x +\tsigmod(x)", 4, 6),  # a tab is one column, drawn as a space
    ],
)
def test_caret_is_under_the_offending_text(text, column, width):
    rendered = refused(text).render()
    line = next(line for line in rendered.splitlines() if "^" in line)
    assert caret_column(rendered) == column
    assert line.strip() == "^" + "~" * (width - 1)


def test_caret_on_the_right_line_of_a_multiline_program():
    err = refused("h = x\nh = h * 2\nh.sigmod()", UnknownNameError)
    rendered = err.render()
    assert "line 3, column 1" in rendered
    assert "    h.sigmod()\n    ^~~~~~~~" in rendered
    assert "did you mean 'sigmoid'?" in rendered


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\x0c\n"])
def test_caret_lines_are_counted_as_python_counts_them(newline):
    # Python ends lines only at \n, \r\n and \r; a form feed is whitespace inside a line.
    text = f"h = x{newline}h + sigmod(x)"
    rendered = refused(text, UnknownNameError).render()
    assert "line 2, column 5" in rendered
    assert "    h + sigmod(x)\n        ^~~~~~" in rendered


def test_a_long_line_is_cut_to_a_window_around_the_caret():
    text = "+".join(["x"] * 500) + " + sigmod(x)"
    rendered = refused(text).render()
    quoted = rendered.splitlines()[2]
    assert len(quoted) <= 4 + 100
    assert quoted[4 + caret_column(rendered):].startswith("sigmod")


# -- what is refused and what it says ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("x ^ 2", "the operator '^' is not part of the language", "use ** for powers"),
        ("sigmod(x)", "unknown function 'sigmod'", "did you mean 'sigmoid'?"),
        ("x.sigmod()", "unknown method 'sigmod'", "did you mean 'sigmoid'?"),
        ("sum(x, dimm=0)", "sum() has no parameter 'dimm'", "did you mean 'dim'?"),
        ("swish(x, bta=1)", "swish() has no parameter 'bta'", "did you mean 'beta'?"),
        ("exp(x, y)", "exp() takes at most 1 argument (2 given)", "its signature is exp(input)"),
        ("logsumexp(x)", "logsumexp() is missing its argument 'dim'", "logsumexp(input, dim, keepdim=False)"),
        ("sum(x, keepdim=True, keepdim=True)", "sum() got 'keepdim' twice", None),
        ("pow(x, 2, exponent=3)", "pow() got 'exponent' twice", None),
        ("x.logsigmoid()", "'logsigmoid' has no method form", "logsigmoid(x, ...)"),
        ("x > 0", "comparisons are only allowed as the condition of where(...)", None),
        ("where(x, x, 0)", "the condition of where(...) must be a comparison", None),
        ("where(0 < x < 1, x, 0)", "chained comparisons are not part of the language", None),
        ("where(x is 0, x, 0)", "the comparison 'is' is not part of the language", None),
        ("sum(x, dim=1.5)", "'dim' must be an integer or a tuple of integers", None),
        ("sum(x, dim=y)", "'dim' must be an integer or a tuple of integers", None),
        ("sum(x, keepdim=1)", "'keepdim' must be True or False", None),
        ("softplus(x, beta=y)", "'beta' must be a constant", None),
        ("x * True", "'True' is only allowed as a True/False argument", None),
        ("x, y", "tuples are only allowed as a dim argument", None),
        ("x * [1, 2]", "lists are only allowed as a dim argument", "--var x=[1, 2, 3]"),
        ("exp", "'exp' is a function; call it", "exp(x)"),
        ("x; y", "only the last statement can be a bare expression", None),
        ("h += x", "augmented assignment (+=) is not part of the language", None),
        ("pi = 3", "'pi' is a constant and cannot be assigned", None),
        ("a = b = x", "an assignment binds exactly one name", None),
        ("", "the expression is empty", None),
        ("# only a comment", "the expression is empty", None),
        ("x +", "invalid syntax", None),
    ],
)
def test_refusals_say_what_and_suggest(text, message, hint):
    err = refused(text)
    assert err.message.startswith(message) or message in err.message
    if hint is not None:
        assert hint in (err.hint or "")
    assert err.render().startswith("error: ")


HOSTILE = [
    "__import__('os').system('touch {marker}')",
    "x.__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "x.__class__.__init__.__globals__",
    "__builtins__",
    "__x + 1",
    "x.real",
    "x.exp",
    "x[0].__class__",
    "x[0:2].data",
    "lambda: open('{marker}', 'w')",
    "[open('{marker}', 'w') for i in [1]]",
    "{{i for i in x}}",
    "{{1: 2}}",
    "(i for i in x)",
    "'{marker}'",
    "b'bytes'",
    "f'{{open(\"{marker}\", \"w\")}}'",
    "(y := open('{marker}', 'w'))",
    "x\x00 + 1",
    "open('{marker}', 'w')",
    "eval('open(\"{marker}\", \"w\")')",
    "exec('1')",
    "getattr(x, 'exp')",
    "import os",
    "from os import system",
    "del x",
    "global x",
    "def f(): pass",
    "class A: pass",
    "with open('{marker}', 'w'): pass",
    "for i in x: pass",
    "while 1: pass",
    "x if y else open('{marker}', 'w')",
    "x and y",
    "not x",
    "~x",
    "x // 2",
    "x % 2",
    "x << 1",
    "x | y",
    "x & y",
    "x is y",
    "x in y",
    "sum(*x)",
    "sum(**x)",
    "x()",
    "x.sum()()",
    "3j",
    "1 + 2j",
    "None",
    "...",
    "await x",
    "assert x",
    "raise x",
    "exp(x).__class__",
    "exp(x).grad_fn",
    "x.register_hook(print)",
    "x.backward()",
    "x.numpy()",
    "x.data",
    "x.requires_grad_(False)",
    "x.add_(1)",
    "sum(x, dim=__import__('os'))",
    "swish(x, beta=open('{marker}', 'w'))",
    "where(open('{marker}', 'w') > 0, x, x)",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_input_is_refused_and_nothing_runs(template, tmp_path):
    marker = tmp_path / "marker"
    text = template.format(marker=marker)
    err = refused(text)
    assert err.render().startswith("error: ")
    assert not marker.exists()


def test_library_bodies_only_see_their_parameters():
    err = refused("x * beta", UnknownNameError, functions={}, allowed_variables=("x",))
    assert err.message == "unknown name 'beta'"
    assert parse("x * beta", functions={}, allowed_variables=("x", "beta")).variables == ("x", "beta")


# -- sizes and limits -------------------------------------------------------------------------
def test_3000_nested_parentheses_are_a_limit_error():
    err = refused("(" * 3000 + "x" + ")" * 3000, LimitError)
    assert "nests parentheses more than 200 levels deep" in err.message


def test_nesting_within_python_limits_parses():
    program = parse("(" * 150 + "x" + ")" * 150)
    assert program.output == x
    deep = parse("exp(" * 150 + "x" + ")" * 150).output
    depth = 0
    while isinstance(deep, n.Call):
        deep, depth = deep.args[0], depth + 1
    assert depth == 150


def test_right_nested_chains_beyond_pythons_parser_are_a_limit_error():
    err = refused("-" * 20_000 + "x", LimitError)
    assert "nested too deeply for Python's parser" in err.message
    err = refused("**".join(["x"] * 5_000), LimitError)
    assert "nested too deeply" in err.message


def test_a_20000_term_sum_parses_into_a_left_nested_chain():
    program = parse("+".join(["x"] * 20_000))
    node, terms = program.output, 1
    while isinstance(node, n.BinOp):
        assert node.op == "+" and node.right == x
        node, terms = node.left, terms + 1
    assert node == x and terms == 20_000
    assert program.variables == ("x",)


def test_depth_limit_and_statement_limit(monkeypatch):
    from gradcli import limits

    err = refused("+".join(["x"] * 30_000), LimitError)
    assert f"nested more than {limits.MAX_DEPTH:,} levels deep" in err.message
    monkeypatch.setattr(limits, "MAX_STATEMENTS", 10)
    err = refused("\n".join(["h = x"] * 11) + "\nh", LimitError)
    assert "the program has 12 statements; the limit is 10" in err.message
    monkeypatch.setattr(limits, "MAX_AST_NODES", 50)
    err = refused("+".join(["x"] * 60), LimitError)
    assert "more than 50 nodes" in err.message


def test_source_length_limit(monkeypatch):
    from gradcli import limits

    monkeypatch.setattr(limits, "MAX_SOURCE_CHARS", 100)
    err = refused("x" * 101, LimitError)
    assert "101 characters long; the limit is 100" in err.message


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("1" + "0" * 400, LimitError, "the number is larger than 1e+300"),
        ("1e400", LimitError, "the number overflows a float64"),
        ("3j", ParseError, "complex numbers are not part of the language"),
        ("x * 2j", ParseError, "complex numbers are not part of the language"),
        ("None", ParseError, "'None' is not part of the language"),
    ],
)
def test_literals_out_of_range(text, kind, message):
    assert message in refused(text, kind).message


def test_9_to_the_9_to_the_9_to_the_9_parses_quickly_and_is_refused_when_interpreted():
    # Parsing never evaluates: the tower is data. Both interpreters refuse it (see
    # test_to_torch / test_to_sympy); here: it parses to the right-nested tree.
    tower = out("9**9**9**9")
    assert tower == n.BinOp("**", n.Num(9), n.BinOp("**", n.Num(9), n.BinOp("**", n.Num(9), n.Num(9))))


def test_arity_and_kwargs_errors_point_at_the_call_or_keyword():
    rendered = refused("y + exp(x, y)", ArgumentError).render()
    assert caret_column(rendered) == 4
    rendered = refused("y + sum(x, dimm=0)", ArgumentError).render()
    assert caret_column(rendered) == 11


def test_the_parser_knows_no_library_until_given_one():
    """The parser takes named functions as a mapping; the library depends on the parser,
    never the reverse, and `gradcli.parse` is the parser with the library's functions."""
    import gradcli
    from gradcli.language import parser
    from gradcli.language.library import default_library

    with pytest.raises(UnknownNameError, match="unknown function 'swish'"):
        parser.parse("swish(x)")
    expected = n.Call("swish", (n.Name("x"),), (), False)
    assert parser.parse("swish(x)", default_library().functions).output == expected
    assert gradcli.parse("swish(x)").output == expected


REPEATED = {
    "lines whole alone": "h = sin(x)\nh = sin(h)\n\n# a comment\nh = sin(h); g = h * 2\nh = sin(h)\nh = sin(g)\nh",
    "a bracket continued": "h = sin(x)\nh = sin(h)\nh = (h +\n  x)\nh = sin(h)\nh = sin(h)\nh",
    "a backslash continued": "h = sin(x)\nh = sin(h) + \\\n  x\nh = sin(h)\nh = sin(h)\nh",
}


@pytest.mark.parametrize("source", REPEATED.values(), ids=REPEATED.keys())
def test_each_statement_keeps_the_lines_python_gives_it(source):
    """Repeated lines are parsed once (refusals.python_statements); the spans are still the
    lines and columns Python's parse of the whole text gives."""
    import ast

    program = parse(source)
    whole = ast.parse(source).body
    assigned = [(s.lineno, s.col_offset, s.end_lineno, s.end_col_offset) for s in whole if isinstance(s, ast.Assign)]
    assert [(a.span.line, a.span.col, a.span.end_line, a.span.end_col) for a in program.statements] == assigned
    last = whole[-1].value
    span = program.output.span
    assert (span.line, span.col, span.end_line, span.end_col) == (last.lineno, last.col_offset, last.end_lineno, last.end_col_offset)


@pytest.mark.parametrize("continued", [False, True])
def test_an_unknown_function_on_a_repeated_line_is_pointed_at_its_own_line(continued):
    lines = ["h = sin(x)"] + ["h = sin(h)"] * 5 + (["h = (h +", "  x)"] if continued else []) + ["h = sinn(h)", "h"]
    err = refused("\n".join(lines), UnknownNameError)
    assert err.span.line == len(lines) - 1
