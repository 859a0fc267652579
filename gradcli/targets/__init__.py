"""What gradcli inspects: a `Target` builds a `Computation` (see base.py)."""
