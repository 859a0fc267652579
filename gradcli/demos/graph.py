"""`gradcli demo graph`: the graph autograd records, from `grad_fn` down to `AccumulateGrad`.

Every tensor computed from a tensor that requires grad has a `grad_fn`: the node that
will run that operation's backward. Its `next_functions` point at the nodes of the
operation's inputs, down to `AccumulateGrad`, which writes a leaf's `.grad`. The nodes
form a DAG, not a tree: a value used twice is one node reached by two edges.
"""

from __future__ import annotations

from typing import Any

from .runner import Session

SUMMARY = "a tensor's grad_fn, next_functions down to AccumulateGrad, saved tensors, and why it is a DAG"


def run(session: Session, **_: Any) -> None:
    session.step("grad_fn: the operation that made a tensor")
    session.say("""A tensor computed from one that requires grad remembers the operation that made it
        in grad_fn. A leaf (created by you, not computed) has none:""")
    session.run("""
        import torch

        torch.manual_seed(0)
        t1 = torch.randn(3, 3, requires_grad=True)
        t2 = t1.pow(2).sum()
        t2.grad_fn.name(), t1.grad_fn, t1.is_leaf
    """)

    session.step("next_functions: the edges, down to AccumulateGrad")
    session.say("""next_functions holds one (node, input_nr) pair per input of the operation: the node
        that produced that input, and which of that node's outputs it was. Following the first
        edge from sum leads to pow:""")
    session.run("""
        pow_node, input_nr = t2.grad_fn.next_functions[0]
        pow_node.name(), input_nr
    """)
    session.say("""A node keeps what its backward needs. The derivative of t1² is 2·t1, so pow saved
        t1 and the exponent (these _saved_ attributes are what backward frees, see
        `gradcli demo backward`):""")
    session.run("torch.equal(pow_node._saved_self, t1), pow_node._saved_exponent")
    session.say("""One edge further is the leaf's node, AccumulateGrad: it adds the incoming
        gradient to t1.grad, and .variable is the leaf itself. Its next_functions is empty: the
        walk ends here.""")
    leaf = session.run("""
        leaf_node = pow_node.next_functions[0][0]
        leaf_node.name(), leaf_node.variable is t1, leaf_node.next_functions
    """)
    session.verdict(leaf[0] == "torch::autograd::AccumulateGrad" and leaf[1] is True, "the walk from t2 ends at t1's AccumulateGrad")

    session.step("Constants, and a DAG rather than a tree")
    session.say("""An input that needs no gradient, such as the constant in t1 * 2, has no node:
        its entry in next_functions is None.""")
    session.run("[(node.name() if node else None, nr) for node, nr in (t1 * 2).grad_fn.next_functions]")
    session.say("""A value used twice is one node with two edges into it. Printing the graph as a
        tree, by plain recursion, repeats what is shared: here h is used three times and x nine
        times, and each further level of such a chain doubles the work.""")
    session.run("""
        x = torch.tensor(2.0, requires_grad=True)
        h = x * x + x
        y = h * h + h

        def show(node, depth=0):
            print("    " * depth + node.name())
            for child, _ in node.next_functions:
                if child is not None:
                    show(child, depth + 1)

        show(y.grad_fn)
    """)
    session.say("""Walking it once per node needs a set of the nodes already seen. torch hands back
        the same Python object for a node while the graph is alive, so id() identifies it:""")
    count = session.run("""
        def nodes(root):
            seen, stack = {}, [root]
            while stack:
                node = stack.pop()
                if id(node) not in seen:
                    seen[id(node)] = node
                    stack.extend(child for child, _ in node.next_functions if child is not None)
            return list(seen.values())

        [node.name() for node in nodes(y.grad_fn)]
    """)
    session.verdict(len(count) == 5, "the graph of y = h*h + h, h = x*x + x has 5 distinct nodes")

    session.step("The same walk with gradcli")
    session.say("""gradcli's walker (gradcli.graph.walk) does this walk and returns plain data: an
        id per node, its edges by id, its saved values, and which leaf an AccumulateGrad writes to.
        `gradcli trace` draws the same data as a tree, with a node met again shown as a
        reference, not repeated:""")
    session.run("""
        from gradcli.graph.walk import walk_graph

        graph = walk_graph(y.grad_fn, leaf_names={id(x): "x"})
        for node in graph.nodes:
            print(node.id, node.name, "->", node.next, node.variable or "")
    """)
    graph = session.namespace["graph"]
    session.verdict(len(graph.nodes) == 5, "gradcli's walker finds the same 5 nodes, each once")
    session.draw(graph, "y.grad_fn, as gradcli trace draws it")
    session.say("""From the shell, with each node's source text and the gradient passes:""")
    session.shell("trace", "h = x*x + x; h*h + h", "--var", "x=2.0")
