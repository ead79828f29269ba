{{/*
Chart name, or nameOverride; at most 63 characters (a DNS label).
*/}}
{{- define "hpcmon.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: fullnameOverride, else <release>-<name> unless the
release name already holds the chart name.
*/}}
{{- define "hpcmon.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "hpcmon.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
<fullname>-<suffix>, kept within 63 characters by shortening the full name.
Call with (list $ "suffix").
*/}}
{{- define "hpcmon.componentName" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $room := sub 62 (len $suffix) | int }}
{{- printf "%s-%s" (include "hpcmon.fullname" $root | trunc $room | trimSuffix "-") $suffix }}
{{- end }}

{{- define "hpcmon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hpcmon.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace }}
{{- end }}

{{/*
Namespace of an object that may live elsewhere (ServiceMonitor, rules, dashboards):
namespaceOverride wins, then the object's own namespace value, then the release's.
Call with (list $ .Values.prometheus.monitor.namespace).
*/}}
{{- define "hpcmon.objectNamespace" -}}
{{- $root := index . 0 }}
{{- $root.Values.namespaceOverride | default (index . 1) | default $root.Release.Namespace }}
{{- end }}

{{- define "hpcmon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hpcmon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "hpcmon.labels" -}}
helm.sh/chart: {{ include "hpcmon.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hpcmon
{{ include "hpcmon.selectorLabels" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of one exporter role (lustre, compute, external). Call with (list $ "role").
*/}}
{{- define "hpcmon.roleSelectorLabels" -}}
{{ include "hpcmon.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "hpcmon.roleLabels" -}}
{{ include "hpcmon.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "hpcmon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "hpcmon.fullname" .) }}
{{- else }}
{{- .Values.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/*
An image reference from {registry, repository, tag, digest}; the tag defaults to appVersion.
Call with (list $ .Values.image).
*/}}
{{- define "hpcmon.image" -}}
{{- $root := index . 0 }}
{{- $image := index . 1 }}
{{- $registry := $root.Values.global.imageRegistry | default $image.registry }}
{{- $reference := $image.repository }}
{{- if $registry }}
{{- $reference = printf "%s/%s" $registry $image.repository }}
{{- end }}
{{- $reference = printf "%s:%s" $reference ($image.tag | default $root.Chart.AppVersion) }}
{{- if $image.digest }}
{{- $reference = printf "%s@%s" $reference $image.digest }}
{{- end }}
{{- $reference }}
{{- end }}

{{/*
imagePullSecrets of the release and of a parent chart, as names or {name: ...} maps.
*/}}
{{- define "hpcmon.imagePullSecrets" -}}
{{- $secrets := concat .Values.global.imagePullSecrets .Values.imagePullSecrets }}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets }}
{{- if kindIs "map" . }}
  - name: {{ .name }}
{{- else }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The scheme the exporters serve: https when their web config turns TLS on.
*/}}
{{- define "hpcmon.scheme" -}}
{{- ternary "https" "http" .Values.exporter.webConfig.tls }}
{{- end }}

{{/*
A Kubernetes object name from a free-form name (a dashboard uid, a file name).
*/}}
{{- define "hpcmon.dnsName" -}}
{{- regexReplaceAll "[^a-z0-9-]+" (lower .) "-" | trimAll "-" }}
{{- end }}

{{/*
checkov's exceptions, made where they apply: the checks every workload of the chart skips,
with their reasons, as a YAML list of "CHECK=reason". Call with (list $ image-values).
*/}}
{{- define "hpcmon.checkovCommonSkips" -}}
{{- $image := index . 1 -}}
- "CKV_K8S_11=No CPU limit: CFS throttling would delay scrapes and flushes; CPU is requested, memory is limited"
- "CKV_K8S_15=The images are versioned (tag or image.digest): IfNotPresent by default, pullPolicy is a value"
{{- if not $image.digest }}
- "CKV_K8S_43=Pinned by version tag by default; set image.digest to pull by digest"
{{- end }}
{{- end }}

{{/*
checkov.io/skipN annotations from a list of "CHECK=reason" strings (checkov's in-place skips);
a check given twice (two containers of one pod) gets one annotation with both reasons.
*/}}
{{- define "hpcmon.checkovAnnotations" -}}
{{- $checks := list }}
{{- $reasons := dict }}
{{- range . }}
{{- $parts := splitn "=" 2 . }}
{{- if hasKey $reasons $parts._0 }}
{{- $_ := set $reasons $parts._0 (printf "%s; %s" (get $reasons $parts._0) $parts._1) }}
{{- else }}
{{- $checks = append $checks $parts._0 }}
{{- $_ := set $reasons $parts._0 $parts._1 }}
{{- end }}
{{- end }}
{{- range $index, $check := $checks }}
checkov.io/skip{{ add1 $index }}: {{ printf "%s=%s" $check (get $reasons $check) | quote }}
{{- end }}
{{- end }}
