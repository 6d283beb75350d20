"""Reading bundles into answers: report, diff, statistics, audit and bisect."""
