"""`gradcli trace`: show the autograd graph, run backward passes, follow the gradient."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import UsageError
from .app import (
    DeviceOption,
    DtypeOption,
    InitOption,
    JsonOption,
    LibraryOption,
    LossInitOption,
    LossOption,
    SeedOption,
    VarOption,
    app,
    read_expression,
    reports_errors,
)

NamesOption = Optional[List[str]]


@app.command("trace")
@reports_errors
def trace_command(
    expr: Annotated[str, typer.Argument(metavar="EXPR", help="The expression or program; @FILE reads a file, - reads stdin. Or your own code: path/to/model.py:NAME or package.module:NAME (importing it runs it, as python would).")],
    var: VarOption = None,
    init: InitOption = None,
    loss: LossOption = None,
    loss_init: LossInitOption = None,
    depth: Annotated[int, typer.Option("--depth", metavar="N", help="Code: fold every module deeper than N into one line (nodes, parameters, shapes); --json and --dot stay complete.")] = 1,
    mode: Annotated[str, typer.Option("--mode", help="backward (torch.autograd.backward: fills .grad) or grad (torch.autograd.grad: returns gradients).")] = "backward",
    wrt: Annotated[NamesOption, typer.Option("--wrt", metavar="NAME", help="Differentiate with respect to NAME (a variable or an assigned name); default all variables. Repeatable.")] = None,
    grad_output: Annotated[Optional[str], typer.Option("--grad-output", metavar="SPEC", help="The starting gradient for a non-scalar output: 'ones' or a --var style SPEC of the output's shape.")] = None,
    retain_graph: Annotated[bool, typer.Option("--retain-graph", help="Keep the graph's saved tensors after a pass, so it can run again.")] = False,
    create_graph: Annotated[bool, typer.Option("--create-graph", help="Build a graph for the gradients too; prints it and d/dx sum(gradient) (the second derivative).")] = False,
    repeat: Annotated[int, typer.Option("--repeat", metavar="N", help="Run the pass N times (.grad accumulates in backward mode).")] = 1,
    zero_grad: Annotated[bool, typer.Option("--zero-grad", help="Set .grad to None between passes, as optimizer.zero_grad() does.")] = False,
    retain_grad: Annotated[NamesOption, typer.Option("--retain-grad", metavar="NAME", help="Keep the .grad of the intermediate NAME (its last assignment). Repeatable.")] = None,
    flow: Annotated[bool, typer.Option("--flow", help="Hook every node: show the gradient entering and leaving it, and where the first nan/inf appeared.")] = False,
    full_values: Annotated[bool, typer.Option("--full-values", help="Every value and gradient in full, however large (without it, a tensor of more than 10,000 elements is a summary: shape, dtype, min, max, mean, norm, the first elements).")] = False,
    symbolic: Annotated[bool, typer.Option("--symbolic", help="The chain rule node by node: each node's local derivatives and the gradient along each edge as formulas, their values beside torch's, each leaf's composed gradient proved equal to sympy's derivative.")] = False,
    dot_formulas: Annotated[bool, typer.Option("--dot-formulas", help="With --symbolic and --dot: label each edge with the gradient formula sent along it.")] = False,
    json: JsonOption = False,
    dot: Annotated[Optional[str], typer.Option("--dot", metavar="PATH", help="Write the graph as Graphviz DOT to PATH ('-' prints it instead of the report); a .svg, .png or .pdf PATH is drawn by Graphviz's dot.")] = None,
    max_nodes: Annotated[int, typer.Option("--max-nodes", metavar="N", help="Draw at most N nodes in the tree (the rest are counted; --json and --dot are complete).")] = 50,
    seed: SeedOption = None,
    dtype: DtypeOption = None,
    device: DeviceOption = "cpu",
    library: LibraryOption = None,
) -> None:
    """Show the autograd graph of EXPR, run backward passes, and follow the gradient.

    Sections: Leaves, Graph (grad_fn.name(), saved tensors, assigned names), Passes,
    Gradients, Chain rule (--symbolic), Flow (--flow). On code (model.py:NAME) each node also
    shows the module and the line of your code that created it, and the graph is folded by
    module. A variable without --var gets a default value (0.5, 1.5, -0.75, 2.0, ... in order
    of appearance), printed; the seed is printed when something random was drawn. Exit status
    1 when a pass raised an autograd error or produced a nan/inf gradient, a --symbolic formula
    DIFFERS from torch, or --flow on code finds a gradient that cancellation made inaccurate; 2
    for bad input.

    Examples:

    \b
      gradcli trace "x.pow(2).sum()" --var "x=randn(3,3)" --seed 0
      gradcli trace "x.pow(2).sum()" --var "x=[1.0, 2.0]" --repeat 2 --retain-graph
      gradcli trace "x.pow(2).sum()" --var "x=[1.0, 2.0]" --mode grad --wrt x
      gradcli trace "(x**3).sum()" --var "x=[1.0, 2.0]" --create-graph
      gradcli trace "sqrt(x).sum()" --var "x=[0.0, 1.0]" --flow          # exit 1: nan from SqrtBackward0
      gradcli trace "h = x*x; h.exp()" --var "x=[1.0, 2.0]" --grad-output ones --retain-grad h
      gradcli trace "h = x*x + x; h.sum()" --json
      gradcli trace "sin(x).sum()" --dot -
      gradcli trace "h = x*x + x; h.sum()" --dot graph.svg
      gradcli trace torch.nn:Linear --init in_features=3 --init out_features=2 --var "input=randn(2,3)" --loss "out.sum()"
      gradcli trace examples/lm/tiny_lm.py:TinyLM --var "ids=randint(0, 50, (2, 8))" --loss "cross_entropy(out[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))" --depth 0
      gradcli trace "h = x*sigmoid(x); y = h*h + h; y.sum()" --var "x=[0.5, 2.0]" --symbolic
    """
    from ..targets.load import is_code_target, refuse_bare_file

    # EXPR is read (and its size limits applied) before torch loads: an endless stdin under a
    # small address-space cap gets the limit's message, not torch's failure to load.
    refuse_bare_file(expr)
    text = expr if is_code_target(expr) else read_expression(expr)

    from ..tracing.trace import trace
    from ..render import graphviz
    from ..render.formats import render
    from .output import exit_status, make_console, say, show, user_prints_aside

    if json and dot == "-":
        raise UsageError("--json and --dot - both want stdout", hint="write the DOT to a file: --dot graph.dot")
    if dot_formulas and not (symbolic and dot is not None):
        raise UsageError("--dot-formulas labels the edges of --dot with --symbolic's formulas",
                         hint="add --symbolic and --dot PATH")
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    if depth < 0:
        raise UsageError("--depth must be 0 or more")

    if dot is not None and dot != "-":
        graphviz.refuse_other_pictures(dot)
    picture = dot is not None and dot != "-" and graphviz.is_picture(dot)
    if picture:
        graphviz.dot_program()  # missing Graphviz is a usage error before any work
    with user_prints_aside(json or dot == "-"):
        result = trace(
            text, var or (), loss=loss, loss_init=loss_init or (), init=init or (), mode=mode, wrt=wrt or (), grad_output=grad_output,
            retain_graph=retain_graph, create_graph=create_graph, repeat=repeat, zero_grad=zero_grad,
            retain_grad=retain_grad or (), flow=flow, symbolic=symbolic, full_values=full_values, dtype=dtype, device=device, seed=seed,
            library_dirs=library or (),
        )
    if dot == "-":
        show(result, "dot", formulas=dot_formulas)
    elif picture:
        graphviz.render(render(result, "dot", formulas=dot_formulas), dot)
    elif dot is not None:
        _write(Path(dot), render(result, "dot", formulas=dot_formulas))
    if json:
        show(result, "json")
    elif dot != "-":
        console = make_console()
        show(result, "text", console, max_nodes=max_nodes, depth=depth)
        if picture:
            say(f"\nGraph drawn to {dot} by Graphviz", console)
        elif dot is not None:
            say(f"\nDOT written to {dot} (render it: dot -Tsvg {dot} -o graph.svg)", console)
    raise typer.Exit(exit_status(result.ok))


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot write the DOT file '{path}': {err.strerror or err}") from None
