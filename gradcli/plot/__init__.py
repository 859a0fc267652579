"""Pictures of a function and its derivatives: `gradcli plot` and `gradcli demo swish --plot`.

`data.plot_data` computes the curves as plain data with the check machinery; `mpl` draws
them with matplotlib (the optional extra `gradcli[plot]`), `terminal` as coarse text.
"""
