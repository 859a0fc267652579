"""Package discovery: every package under gradcli/, plus expressions/ shipped as gradcli.expressions.

The metadata lives in pyproject.toml. This file exists only because pyproject's `find` cannot
also list a package mapped from another folder (`expressions/` -> `gradcli.expressions`), and a
hand-written list of packages once shipped a wheel without one of them.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["gradcli", "gradcli.*"]), "gradcli.expressions"])
