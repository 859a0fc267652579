"""Checking gradients: autograd against sympy and finite differences (check.py), and a user's
own torch.autograd.Function (function.py)."""
