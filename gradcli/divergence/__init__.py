"""`gradcli diverge`: one training script run twice, under two setups, side by side, and the
first optimizer step, phase, module and cause where the two runs part, judged against a band
measured from float32's own rounding (a float64 run of the same script)."""
