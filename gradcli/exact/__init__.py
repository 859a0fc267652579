"""The exact derivative: sympy under a time budget, domains, kinks, 50-digit arbitration.

Below chain/, plot/ and verify/, which all compare against it; it imports none of them."""
