"""`gradcli memory`: what backward keeps alive, by node, module and line, and which
checkpoint would pay (saved.py counts, peak.py measures, checkpoint.py proves, run.py runs).

`gradcli.memory` is both this folder and the public function `gradcli.memory(model, ...)`:
importing any module in here makes Python set the package as the attribute `memory` of
`gradcli`, over the lazily imported function. So the package itself is callable, and calling
it is calling the public function (gradcli/api.py's, which returns a result that renders).
"""

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import gradcli

        return gradcli.public("memory")(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
