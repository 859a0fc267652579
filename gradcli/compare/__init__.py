"""`gradcli compare`: a training setup's gradients against the eager reference's."""
