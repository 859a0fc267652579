"""`gradcli compare`: a training setup's gradients (torch.compile, autocast, half precision)
against the eager float32 reference's, parameter by parameter, where they part and why.

Named comparison/, not compare/, so that `gradcli.compare` stays the public function.
"""
