"""The third truth: finite differences (gradcheck, Jacobians) and who is right when they disagree."""
