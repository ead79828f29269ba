#!/usr/bin/env bash
# How the JSON Schemas in this folder were made (not run by the tests: the result is committed).
# Grafana's dashboard model from its npm package @grafana/schema, turned into JSON Schema by
# ts-json-schema-generator: the dashboard (raw/dashboard/x) and, for each panel type the
# generated dashboards use, that panel's Options and FieldConfig (raw/composable/<panel>).
set -euo pipefail
OUT="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
cd "$WORK"
npm init -y >/dev/null
npm install --no-audit --no-fund @grafana/schema@13.2.3 ts-json-schema-generator@2.10.0 typescript@5 >/dev/null
RAW=node_modules/@grafana/schema/dist/types/raw
gen() {  # file, type, output
  npx ts-json-schema-generator --path "$1" --type "$2" --no-type-check --expose export -o "$3"
}
gen "$RAW/dashboard/x/types.gen.d.ts" Dashboard "$OUT/dashboard.schema.json"
for panel in timeseries stat table bargauge heatmap statetimeline piechart text; do
  file="$RAW/composable/$panel/panelcfg/x/types.gen.d.ts"
  gen "$file" Options "$OUT/panel-$panel-options.schema.json"
  if grep -q "export interface FieldConfig" "$file"; then
    gen "$file" FieldConfig "$OUT/panel-$panel-fieldconfig.schema.json"
  fi
done
node -e 'console.log(require("./node_modules/@grafana/schema/package.json").version)' > "$OUT/VERSION"
rm -rf "$WORK"
