"""Run a bench script under the process rules gradcli's console script uses, for a like-for-like
figure beside the script as a user runs it.

    python bench/as_gradcli_exits.py bench/handwritten_function.py [ARGS...]

`gradcli.cli.main` turns the cyclic garbage collector off and leaves with `os._exit` once its
output is flushed (its docstring gives the measurements: `import torch` is ~0.17 s faster
with the collector off, and tearing torch down costs ~0.8 s). A hand-written script pays
both, so its ratio to gradcli mixes the checks' cost with those two; under this wrapper the
ratio is of the work and the imports alone.
"""

import gc
import os
import runpy
import sys

gc.disable()
script, sys.argv = sys.argv[1], sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as done:
    code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
