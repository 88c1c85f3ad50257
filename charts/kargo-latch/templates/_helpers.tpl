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
The identities of Kargo's controllers, whose Promotions without a person as
create-actor are auto-promotions: the exact usernames (the ServiceAccount of
pauseGate.kargoControllerServiceAccount, then pauseGate.kargoControllers),
and/or the RE2 regex pauseGate.kargoControllerRegex. The same setting as the
kustomize install's kargo-latch-kargo-controllers
(manifests/base/kargo-controllers.yaml).

kargo-latch.kargoControllerUsernames is the usernames, comma-separated.
*/}}
{{- define "kargo-latch.kargoControllerUsernames" -}}
{{- $names := list }}
{{- with .Values.pauseGate.kargoControllerServiceAccount }}
{{- if .name }}
{{- $names = append $names (printf "system:serviceaccount:%s:%s" (required "pauseGate.kargoControllerServiceAccount.namespace is required with its name" .namespace) .name) }}
{{- end }}
{{- end }}
{{- range $i, $name := .Values.pauseGate.kargoControllers }}
{{- $name = toString $name }}
{{- if or (eq $name "") (contains "," $name) (contains "'" $name) }}
{{- fail (printf "pauseGate.kargoControllers[%d]: %q is not a username: it may be neither empty nor hold a comma or a single quote" $i $name) }}
{{- end }}
{{- $names = append $names $name }}
{{- end }}
{{- if contains "'" (toString .Values.pauseGate.kargoControllerRegex) }}
{{- fail "pauseGate.kargoControllerRegex may not hold a single quote: write it as \\x27" }}
{{- end }}
{{- if and (not $names) (not .Values.pauseGate.kargoControllerRegex) }}
{{- fail "pauseGate names none of Kargo's controllers: set pauseGate.kargoControllerServiceAccount, pauseGate.kargoControllers or pauseGate.kargoControllerRegex" }}
{{- end }}
{{- join "," $names -}}
{{- end -}}

{{/*
A CEL condition, true when the requester is one of Kargo's controllers: its
username is one of kargo-latch.kargoControllerUsernames, or matches
pauseGate.kargoControllerRegex WHOLE (anchored: ^(?:<regex>)$; Kargo's own
controlplaneUserRegex is matched unanchored; empty matches nothing). Word
for word the kustomize install's, whose components/kargo-controllers writes
the r'''…''' literals: the usernames, the regex alone (so that the API
server refuses an invalid one when it stores the policy), and the regex
anchored. The chart refuses an invalid regex itself, when it renders.
*/}}
{{- define "kargo-latch.isKargoController" -}}
{{- $kargoControllerRegex := toString .Values.pauseGate.kargoControllerRegex }}
{{- /* Fails the render, naming the regex's error, when it is no RE2 regex. */}}
{{- $_ := mustRegexMatch $kargoControllerRegex "" -}}
request.userInfo.username in r'''{{ include "kargo-latch.kargoControllerUsernames" . }}'''.split(",").map(n, n.trim()) ||
(request.userInfo.username.matches(r'''{{ $kargoControllerRegex }}''') && request.userInfo.username.matches(r'''^(?:(?:){{ $kargoControllerRegex }}(?:))$'''))
{{- end -}}

{{/*
A CEL condition, true when a Promotion (or PromotionRequest) has the shape
of an auto-promotion: no kargo.akuity.io/create-actor, or one starting with
"controller:". Kargo's webhook gives every other Promotion a person's.
*/}}
{{- define "kargo-latch.isAutoPromotion" -}}
!has(object.metadata.annotations) ||
!('kargo.akuity.io/create-actor' in object.metadata.annotations) ||
object.metadata.annotations['kargo.akuity.io/create-actor'].startsWith('controller:')
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

{{/*
The settings a shard of controller.shards may set for its own operator, in
place of the controller's (a map or list as a whole).
*/}}
{{- define "kargo-latch.shardSettings" -}}
replicas logLevel workers kubeApiQPS kubeApiBurst resources env args nodeSelector tolerations affinity podLabels podAnnotations
{{- end -}}

{{/*
The names of controller.shards, validated, as a JSON list (read it with
fromJsonArray). An entry is a shard's name, or a map with its name and its
own settings (kargo-latch.shardSettings).
  - A name is the value of Kargo's Stage label kargo.akuity.io/shard, so it
    must be a label value; the chart names a Deployment and a Service after
    it, so it must be a DNS label too, and the names must fit 63 characters.
  - "default" is the operator's StagePause status key for the Stages
    without the label (the main Deployment's, --default-shard): the operator
    refuses it as a shard.
  - Each shard has exactly one operator: no name twice.
  - The chart sets --shard and --default-shard itself; and a Lease named in
    controller.args would be every shard's, so that one leader would serve
    them all: each operator names its own after its shard.
*/}}
{{- define "kargo-latch.shardNames" -}}
{{- $c := .Values.controller }}
{{- $fullname := include "kargo-latch.fullname" . }}
{{- $allowed := include "kargo-latch.shardSettings" . | splitList " " }}
{{- $names := list }}
{{- range $i, $entry := $c.shards }}
{{- $what := printf "controller.shards[%d]" $i }}
{{- $name := $entry }}
{{- $args := $c.args }}
{{- if kindIs "map" $entry }}
{{- $name = required (printf "%s has no name" $what) $entry.name }}
{{- range $key := keys $entry | sortAlpha }}
{{- if not (or (eq $key "name") (has $key $allowed)) }}
{{- fail (printf "%s: a shard may set name and %s, not %s" $what (join ", " $allowed) $key) }}
{{- end }}
{{- end }}
{{- if hasKey $entry "args" }}
{{- $args = $entry.args }}
{{- end }}
{{- end }}
{{- $name = toString $name }}
{{- if not (and (le (len $name) 63) (regexMatch "^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$" $name)) }}
{{- fail (printf "%s: %q is not a valid label value, so no Stage can carry it in kargo.akuity.io/shard (at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)" $what $name) }}
{{- end }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "%s: the chart names the Deployment and Service of shard %q after it, so it may hold only lowercase letters, digits and '-'" $what $name) }}
{{- end }}
{{- if eq $name "default" }}
{{- fail (printf "%s: \"default\" cannot be a shard: it is kargo-latch's name for the Stages without kargo.akuity.io/shard, which the main Deployment takes (--default-shard)" $what) }}
{{- end }}
{{- if has $name $names }}
{{- fail (printf "%s: shard %q is listed twice; each shard needs exactly one operator" $what $name) }}
{{- end }}
{{- $longest := printf "%s-%s" $fullname $name }}
{{- if $c.metrics.enabled }}
{{- $longest = printf "%s-metrics" $longest }}
{{- end }}
{{- if gt (len $longest) 63 }}
{{- fail (printf "%s: the name %s, made from shard %q, is longer than 63 characters: shorten the shard's name or fullnameOverride" $what $longest $name) }}
{{- end }}
{{- range $arg := $args }}
{{- if regexMatch "^--?(shard|default-shard)(=|$)" (toString $arg) }}
{{- fail (printf "%s: its args hold %s; the chart sets --shard and --default-shard itself" $what $arg) }}
{{- end }}
{{- end }}
{{- $names = append $names $name }}
{{- end }}
{{- if $names }}
{{- range $arg := $c.args }}
{{- if regexMatch "^--?(shard|default-shard|leader-election-id)(=|$)" (toString $arg) }}
{{- fail (printf "controller.args holds %s, which every shard's operator would share: with controller.shards, the chart sets --shard and --default-shard, and each operator names its Lease after its shard (one Lease would elect one leader for them all; a shard's own args may name its Lease)" $arg) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $names }}
{{- end -}}

{{/*
Selector labels of a shard's operator: the shard, and not the main
Deployment's app.kubernetes.io/name, because its selector (immutable, and
the kustomize install's) would then match the shard's pods too.
*/}}
{{- define "kargo-latch.shardSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-shard" (include "kargo-latch.name" .root) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
kargo-latch.io/shard: {{ .shard | quote }}
{{- end -}}
