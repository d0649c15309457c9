"""This platform against a peer server (Aegra) on the same workload, side by side."""
