"""Reading a built autograd graph: walking grad_fn (graph.py), hooks during backward (flow.py)."""
