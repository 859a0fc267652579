"""Why a gradient is wrong or not finite: causes found from evidence, as data."""
