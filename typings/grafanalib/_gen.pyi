# Hand-written stub of grafanalib 0.7.1's API (Apache-2.0) for the type checker: the JSON
# encoder of grafanalib._gen that serialises grafanalib objects through their to_json_data.
import json
from typing import Any

class DashboardEncoder(json.JSONEncoder):
    def default(self, obj: Any) -> Any: ...

def __getattr__(name: str) -> Any: ...
