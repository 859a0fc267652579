"""`trace --symbolic`: the chain rule node by node, as formulas beside torch's backward graph.

The program is built once with torch while every operation is recorded (interpret/applications.py); each
recorded operation becomes a formula in named values (compose.py: the local derivative of
every edge from language/derivatives.py, the gradient along it, the sum where paths meet);
the formulas are evaluated at the traced values and set beside what `--flow`'s hooks saw
(numbers.py); at each leaf the composed gradient is compared with sympy's own derivative
(proof.py). The result is plain data (result.py) for the renderers.
"""
