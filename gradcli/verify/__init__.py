"""Checking gradients, one room per concern (each below 20 modules):

- expression/: `gradcli check`, autograd against the exact derivative (gradcli/exact/) and
  finite differences;
- function/: `gradcli check-function`, a user's own torch.autograd.Function;
- discovery/: check-function over every Function a package defines or a model applies;
- causes/: why a gradient is wrong or not finite, named from graph evidence;
- finite_differences/: gradcheck, Jacobians, and who is right when they disagree.
"""
