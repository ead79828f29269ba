# Hand-written stub of grafanalib 0.7.1's API (Apache-2.0) for the type checker.
# The package itself defines nothing: see core, influxdb and _gen.
from typing import Any

def __getattr__(name: str) -> Any: ...
