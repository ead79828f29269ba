"""Development tools of this repository, not part of the installed package: `make demo`, the
Recorder trace writer the tests and benchmarks make traces with."""
