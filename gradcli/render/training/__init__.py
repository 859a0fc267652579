"""The reports of the commands about training setups: compare, memory and the distributed runs."""
