"""`gradcli compare`: a training setup's gradients against the eager reference's.

The folder is also `gradcli.compare(model, *inputs, ...)`, the Python API (gradcli/__init__.py).
"""

from .. import callable_package

callable_package(__name__)
