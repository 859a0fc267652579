"""The demos: short tutorials that run real torch code and print it with what it produced."""
