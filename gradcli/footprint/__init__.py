"""`gradcli memory`: what backward keeps alive, by node, module and line, and which
checkpoint would pay (saved.py counts, peak.py measures, checkpoint.py proves, run.py runs).

Named footprint/, not memory/, so that `gradcli.memory` stays the public function.
"""
