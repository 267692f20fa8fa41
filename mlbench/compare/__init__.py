"""Comparing runs: rules, the noise guard (Mann–Whitney U, bootstrap intervals), the comparison."""
