"""`gradcli trace`: build a target, walk its graph, run the passes, follow the flow, and explain.

Above graph/ (the walk), chain/ (--symbolic) and verify/causes/ (why a gradient is not finite),
which it puts together into one TraceResult."""
