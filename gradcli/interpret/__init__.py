"""The two interpreters of the AST: torch (a real autograd graph) and sympy (exact formulas)."""
