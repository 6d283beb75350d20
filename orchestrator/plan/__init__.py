"""Matrix expansion and sandboxed rendering into fully rendered Cells."""
