{{/* The chart's names and the parts every Toolbus pod shares. */}}

{{- define "toolbus.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "toolbus.labels" -}}
app.kubernetes.io/name: toolbus
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "toolbus.selector" -}}
app.kubernetes.io/name: toolbus
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "toolbus.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret of a service's credentials: named in values, or the chart's. */}}
{{- define "toolbus.secret" -}}
{{- $named := index .root.Values.credentials.secrets .key -}}
{{- if and $named (not .root.Values.credentials.create) -}}
{{- if eq .key "workers" -}}{{ printf "%s-%s" $named .namespace }}{{- else -}}{{ $named }}{{- end -}}
{{- else if eq .key "workers" -}}
{{- printf "%s-worker-%s-creds" (include "toolbus.fullname" .root) .namespace -}}
{{- else if or (eq .key "console") (eq .key "mcp") -}}
{{- printf "%s-%s" (include "toolbus.fullname" .root) .key -}}
{{- else -}}
{{- printf "%s-%s-creds" (include "toolbus.fullname" .root) .key -}}
{{- end -}}
{{- end -}}

{{/* Pod annotations: Prometheus's scrape annotations, and a checksum of
what the chart made that the pod reads, so a change rolls the pods. */}}
{{- define "toolbus.podAnnotations" -}}
{{- if .root.Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .root.Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with .checksum }}
checksum/config: {{ . | sha256sum }}
{{- end }}
{{- end -}}

{{/* The container's parts every Toolbus process shares: the image, the
security context, the probes on --metrics-listen, NATS's URL. */}}
{{- define "toolbus.container" -}}
image: {{ include "toolbus.image" .root | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
securityContext:
  {{- toYaml .root.Values.securityContext | nindent 2 }}
env:
  - name: TOOLBUS_URL
    value: {{ required "nats.url is required: the NATS cluster's client URLs" .root.Values.nats.url | quote }}
  - name: GOMEMLIMIT
    valueFrom:
      resourceFieldRef:
        resource: limits.memory
        divisor: "1"
ports:
  - name: metrics
    containerPort: {{ .root.Values.metrics.port }}
    protocol: TCP
  {{- with .ports }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
startupProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: {{ .root.Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .root.Values.probes.startup.failureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: {{ .root.Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.liveness.failureThreshold }}
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: {{ .root.Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .root.Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .root.Values.probes.readiness.failureThreshold }}
resources:
  {{- toYaml .resources | nindent 2 }}
{{- end -}}

{{- define "toolbus.podSpec" -}}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodMonitor of a component's pods. */}}
{{- define "toolbus.podMonitor" -}}
{{- if .root.Values.metrics.podMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: {{ include "toolbus.fullname" .root }}-{{ .name }}
  labels:
    {{- include "toolbus.labels" . | nindent 4 }}
    {{- with .root.Values.metrics.podMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "toolbus.selector" . | nindent 6 }}
  podMetricsEndpoints:
    - port: metrics
      path: /metrics
      interval: {{ .root.Values.metrics.podMonitor.interval }}
{{- end }}
{{- end -}}
