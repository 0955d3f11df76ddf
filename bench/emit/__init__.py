"""The parts of bench/emit_overhead.py: the variants it times (variants) and its report."""
