{{/* vim: set filetype=mustache: */}}
{{/*
The chart's name.
*/}}
{{- define "kargo-latch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object's name, and the operator's ServiceAccount. A
release named kargo-latch gets "kargo-latch": the names of the kustomize
install. Cluster-scoped objects carry it too, so that two releases never
share one.
*/}}
{{- define "kargo-latch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "kargo-latch.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Kargo's controller's user name, whose Promotions are auto-promotions.
*/}}
{{- define "kargo-latch.kargoControllerUser" -}}
{{- with .Values.pauseGate.kargoControllerServiceAccount -}}
{{- printf "system:serviceaccount:%s:%s" (required "pauseGate.kargoControllerServiceAccount.namespace is required" .namespace) (required "pauseGate.kargoControllerServiceAccount.name is required" .name) -}}
{{- end -}}
{{- end -}}

{{/*
The image of the operator.
*/}}
{{- define "kargo-latch.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "kargo-latch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: the only label the kustomize install puts on its
Deployment, pods and Service, plus the release.
*/}}
{{- define "kargo-latch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kargo-latch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
metadata of an object: name, namespace when given, labels (the chart's
standard ones, global.labels and the object's own), and annotations
(global.annotations and the object's own). Call it with a dict:
  root: the chart's context (.)
  name: the object's name
  namespace: the namespace, for a namespaced object
  labels, annotations: the object's own (optional)
*/}}
{{- define "kargo-latch.metadata" -}}
metadata:
  name: {{ .name }}
  {{- with .namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    helm.sh/chart: {{ include "kargo-latch.chart" .root }}
    {{- include "kargo-latch.selectorLabels" .root | nindent 4 }}
    app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
    app.kubernetes.io/managed-by: {{ .root.Release.Service }}
    {{- with (mergeOverwrite (deepCopy .root.Values.global.labels) (.labels | default dict)) }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with (mergeOverwrite (deepCopy .root.Values.global.annotations) (.annotations | default dict)) }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
