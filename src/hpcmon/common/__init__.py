"""What every part of hpcmon shares: job ids, time, configuration errors, process handling and
the exporter's metric names."""
