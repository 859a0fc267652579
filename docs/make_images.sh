#!/usr/bin/env bash
# Regenerate the pictures of README.md and the docs site in docs/images/ (run from anywhere: bash docs/make_images.sh).
# Needs the plotting extra (pip install 'gradcli[plot]') and Graphviz's `dot` for the graph.
# The files carry no dates, so rerunning changes them only when the drawing changes.
set -euo pipefail
cd "$(dirname "$0")/.."
GRADCLI=${GRADCLI:-gradcli}
out=docs/images

# 1. A plot: softplus written naively. autograd's derivative is nan past x = 709.78 (exp
#    overflows) where the true derivative is 1: the range is shaded, and gradcli exits 1.
status=0
"$GRADCLI" plot "log(1+exp(x))" --var "x=linspace(-800,800,2001)" -o "$out/softplus.png" || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (autograd wrong past 709.78), got $status" >&2; exit 1; }

# 2. A rendered autograd graph (Graphviz).
"$GRADCLI" trace "h = x*x + x; h = h*sigmoid(h); h.sum()" --var "x=[0.5, 1.5]" --dot "$out/graph.svg" >/dev/null

# 3. The Swish demo's curves for several β.
"$GRADCLI" demo swish --plot "$out/swish.png" >/dev/null

# 4. grads on the example classifier: the detached aux head and the unused proj layer are
#    hatched and labelled "no grad"; below, each layer's ‖grad‖ over 8 SGD steps. Exit 1.
status=0
"$GRADCLI" grads examples/grads/classifier.py:Net --var "x=randn(32, 3, 32, 32)" --var "y=randint(0, 10, (32,))" \
    --loss "cross_entropy(out, y)" --seed 0 --steps 8 --lr 0.1 --plot "$out/grads.png" >/dev/null || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (two layers get no gradient), got $status" >&2; exit 1; }

# 5. compare: each layer's relative error under float16 autocast, over the tolerance band: the
#    loss scaled down until float16 flushes every gradient to zero. Exit 1.
status=0
"$GRADCLI" compare examples/compare/models.py:MLP --var "x=randn(16, 32)" --loss "1e-7 * out.pow(2).mean()" --amp float16 \
    --seed 0 --plot "$out/compare.png" >/dev/null || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (float16 underflow), got $status" >&2; exit 1; }

# 6. memory: the bytes saved for backward by module, in forward order (no checkpoint trials:
#    their times would change the picture from one run to the next).
"$GRADCLI" memory examples/memory/mlp.py:DeepMLP --init depth=4 --var "x=randn(16, 128)" --loss "out.pow(2).mean()" \
    --seed 0 --checkpoint 0 --no-create-graph --plot "$out/memory.png" >/dev/null

# 7. watch: a run with a one-batch label spike at step 15, its log drawn (loss, gradient norm,
#    each module's gradient norm; the flagged step marked). Exit 1 (two findings).
status=0
"$GRADCLI" watch -q --plot "$out/watch.png" examples/watch/train.py --fault spike --at 15 --steps 40 >/dev/null 2>&1 || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (a loss and a gradient-norm spike), got $status" >&2; exit 1; }

# 8. watch: the README's stopped run (log(0) in a hand-written loss at step 12), its log drawn up
#    to the stop; the stopped step's non-finite gradient norms in red. Exit 1.
status=0
"$GRADCLI" watch -q --plot "$out/watch_stop.png" examples/watch/train.py --fault log0 --at 12 --steps 20 >/dev/null 2>&1 \
    || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (the run is stopped at step 12), got $status" >&2; exit 1; }

# diverge: eager against compile:aot_eager, a forward hook registered at step 5 after the model
#    was compiled: each parameter's gradient distance in bands jumps past the band there. Exit 1.
status=0
"$GRADCLI" diverge --b compile:aot_eager --plot "$out/diverge_hook.png" examples/diverge/train.py --steps 20 --hook-at 5 \
    >/dev/null || status=$?
[ "$status" -eq 1 ] || { echo "expected exit status 1 (the runs part at step 5), got $status" >&2; exit 1; }

ls -l "$out"

