{{/*
One exporter DaemonSet. Call with a dict:
  root: $, role: "lustre"|"compute", settings: the role's values,
  args: list of role flags, mounts / volumes / initContainers: lists of maps,
  sidecars: containers after the exporter, as maps (optional),
  podSecurityContext / containerSecurityContext: maps,
  skips: checkov checks this role skips, "CHECK=reason" each (optional).
*/}}
{{- define "hpcmon.daemonset" -}}
{{- $root := .root }}
{{- $settings := .settings }}
{{- $exporter := $root.Values.exporter }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "hpcmon.componentName" (list $root .role) }}
  namespace: {{ include "hpcmon.namespace" $root }}
  labels:
    {{- include "hpcmon.roleLabels" (list $root .role) | nindent 4 }}
  {{- $skips := concat (include "hpcmon.checkovCommonSkips" (list $root $root.Values.image) | fromYamlArray) (.skips | default list) }}
  {{- if $settings.hostNetwork }}
  {{- $skips = append $skips "CKV_K8S_19=hostNetwork is an opt-in value: the exporter then listens on the node's address" }}
  {{- end }}
  annotations:
    {{- include "hpcmon.checkovAnnotations" $skips | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "hpcmon.roleSelectorLabels" (list $root .role) | nindent 6 }}
  revisionHistoryLimit: {{ $root.Values.revisionHistoryLimit }}
  {{- with $settings.updateStrategy }}
  updateStrategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "hpcmon.roleLabels" (list $root .role) | nindent 8 }}
        {{- with $settings.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $settings.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "hpcmon.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- with include "hpcmon.imagePullSecrets" $root }}
      {{- . | trim | nindent 6 }}
      {{- end }}
      securityContext:
        {{- toYaml .podSecurityContext | nindent 8 }}
      {{- with $settings.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      hostNetwork: {{ $settings.hostNetwork }}
      {{- if $settings.hostNetwork }}
      dnsPolicy: ClusterFirstWithHostNet
      {{- end }}
      {{- with .initContainers }}
      initContainers:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: exporter
          image: {{ include "hpcmon.image" (list $root $root.Values.image) | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- if $settings.hostNetwork }}
            - --web.listen-address=[$(HOST_IP)]:{{ $exporter.port }}
            {{- else }}
            - --web.listen-address=:{{ $exporter.port }}
            {{- end }}
            - --web.telemetry-path={{ $exporter.telemetryPath }}
            - --log.level={{ $exporter.logLevel }}
            {{- if $exporter.webConfig.secretName }}
            - --web.config.file=/etc/hpcmon/web/{{ $exporter.webConfig.key }}
            {{- end }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- range $settings.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          {{- if or $settings.hostNetwork $exporter.env }}
          env:
            {{- if $settings.hostNetwork }}
            - name: HOST_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.hostIP
            {{- end }}
            {{- range $name, $value := $exporter.env }}
            - name: {{ $name }}
              value: {{ $value | quote }}
            {{- end }}
          {{- end }}
          ports:
            - name: {{ $exporter.portName }}
              containerPort: {{ $exporter.port }}
              protocol: TCP
          livenessProbe:
            tcpSocket:
              port: {{ $exporter.portName }}
            {{- toYaml $exporter.livenessProbe | nindent 12 }}
          readinessProbe:
            tcpSocket:
              port: {{ $exporter.portName }}
            {{- toYaml $exporter.readinessProbe | nindent 12 }}
          {{- with $settings.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml .containerSecurityContext | nindent 12 }}
          volumeMounts:
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- if $exporter.webConfig.secretName }}
            - name: web-config
              mountPath: /etc/hpcmon/web
              readOnly: true
            {{- end }}
        {{- with .sidecars }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      volumes:
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- if $exporter.webConfig.secretName }}
        - name: web-config
          secret:
            secretName: {{ $exporter.webConfig.secretName }}
        {{- end }}
      {{- with $settings.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $settings.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $settings.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/*
The container security context every exporter container starts from: no privilege
escalation, a read-only root file system, every capability dropped.
*/}}
{{- define "hpcmon.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end }}
