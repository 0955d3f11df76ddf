"""The parts of bench/consumer_throughput.py: its topics, the contenders and their clock, and
its report."""
