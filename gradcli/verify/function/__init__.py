"""`gradcli check-function`: is the backward of a user's torch.autograd.Function right?"""
