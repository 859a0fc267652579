"""Reading a built autograd graph: walking grad_fn (walk.py), hooks during backward (flow.py)."""
