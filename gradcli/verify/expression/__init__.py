"""`gradcli check`: an expression's autograd against the exact derivative and finite differences."""
