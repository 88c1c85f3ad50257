{{/* vim: set filetype=mustache: */}}
{{- /*
One operator Deployment (manifests/base/deployment.yaml): the main one, and
one per shard of controller.shards. Call it with a dict:
  root: the chart's context (.)
  name: the Deployment's name
  what: the values that set it, for error messages ("controller", or
        "controller.shards[N]")
  settings: controller's values, with a shard's own settings in place
  selectorLabels: the labels (YAML) that select its pods
  labels: the Deployment's own labels
  shardFlag: "--default-shard", "--shard=NAME", or "" for an unsharded install

A setting's flag is written only when its value differs from the operator's
own default, the last column below, which values.yaml shows too: a default
install runs the same arguments as the kustomize install. Tests hold the
three in step: the kustomize comparison (values.yaml = this column) and the
operator's -help (this column = the operator).
*/ -}}
{{- define "kargo-latch.operator" -}}
{{- $root := .root }}
{{- $c := .settings }}
{{- if and (gt (int $c.replicas) 1) (not $c.leaderElection.enabled) }}
{{- fail (printf "%s.replicas above 1 needs controller.leaderElection.enabled: replicas without a leader would all reconcile" .what) }}
{{- end }}
{{- $flags := list }}
{{- /* verify-on-latch's rights are installed (verify-on-latch.yaml): let Stages opt in.
The verify-on-latch values are read with dig: after a `helm upgrade
--reuse-values` from a chart that lacked them, they are missing, and the
operator's defaults apply. */ -}}
{{- if dig "installRights" false ($root.Values.verifyOnLatch | default dict) }}
{{- $flags = append $flags "--enable-verify-on-latch" }}
{{- else if dig "verifyOnLatch" false $c.stageDefaults }}
{{- fail (printf "%s.stageDefaults.verifyOnLatch needs verifyOnLatch.installRights: without its rights and --enable-verify-on-latch, the operator starts no verification and warns on every Stage that asks for one" .what) }}
{{- end }}
{{- range $setting := list
      (list "v" (int $c.logLevel) 0)
      (list "workers" (int $c.workers) 8)
      (list "kube-api-qps" $c.kubeApiQPS 200)
      (list "kube-api-burst" (int $c.kubeApiBurst) 500)
      (list "new-failure-window" $c.newFailureWindow "15m")
      (list "pause-on-failure" $c.stageDefaults.pauseOnFailure false)
      (list "latch-deadline" $c.stageDefaults.latchDeadline "30m")
      (list "degraded-grace" $c.stageDefaults.degradedGrace "5m")
      (list "drain-on-pause" $c.stageDefaults.drainOnPause true)
      (list "mark-verified" $c.stageDefaults.markVerified false)
      (list "verify-on-latch" (dig "verifyOnLatch" false $c.stageDefaults) false)
      (list "verify-grace" (dig "verifyGrace" "10s" $c) "10s")
      (list "verify-terminate-after" (dig "verifyTerminateAfter" "30s" $c) "30s")
      (list "verify-pickup-timeout" (dig "verifyPickupTimeout" "2m" $c) "2m")
      (list "rollouts-controller-instance-id" (dig "rolloutsControllerInstanceID" "" $c) "") }}
{{- if ne (toString (index $setting 1)) (toString (index $setting 2)) }}
{{- $flags = append $flags (printf "--%s=%v" (index $setting 0) (index $setting 1)) }}
{{- end }}
{{- end }}
{{- /* The pause gate's setting that names Kargo's controllers, given to the
operator (GateBypassed's advice, and the comparison with the policies at
start) from its ConfigMap by two variables its flags name, as the kustomize
install does. */}}
{{- $kargoControllers := printf "%s-kargo-controllers" (include "kargo-latch.fullname" $root) -}}
apiVersion: apps/v1
kind: Deployment
{{ include "kargo-latch.metadata" (dict "root" $root "name" .name "namespace" $root.Release.Namespace "labels" .labels "annotations" $c.annotations) }}
spec:
  replicas: {{ $c.replicas }}
  selector:
    matchLabels:
      {{- .selectorLabels | nindent 6 }}
  template:
    metadata:
      labels:
        {{- .selectorLabels | nindent 8 }}
        {{- with (mergeOverwrite (deepCopy $root.Values.global.podLabels) ($c.podLabels | default dict)) }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with (mergeOverwrite (deepCopy $root.Values.global.podAnnotations) ($c.podAnnotations | default dict)) }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "kargo-latch.fullname" $root }}
      {{- with $root.Values.image.pullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with ($c.securityContext | default $root.Values.global.securityContext) }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with ($c.nodeSelector | default $root.Values.global.nodeSelector) }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with ($c.tolerations | default $root.Values.global.tolerations) }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with ($c.affinity | default $root.Values.global.affinity) }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: kargo-latch
        image: {{ include "kargo-latch.image" $root }}
        {{- with $root.Values.image.pullPolicy }}
        imagePullPolicy: {{ . }}
        {{- end }}
        env:
        {{- with $c.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        - name: KARGO_LATCH_KARGO_CONTROLLERS
          valueFrom:
            configMapKeyRef:
              name: {{ $kargoControllers }}
              key: usernames
        - name: KARGO_LATCH_KARGO_CONTROLLER_REGEX
          valueFrom:
            configMapKeyRef:
              name: {{ $kargoControllers }}
              key: regex
        args:
        {{- if $c.leaderElection.enabled }}
        - --leader-elect
        {{- end }}
        {{- if $c.metrics.enabled }}
        - --metrics-bind-address=:{{ $c.metrics.service.port }}
        {{- else }}
        - --metrics-bind-address=0
        {{- end }}
        - --health-probe-bind-address=:8081
        - --kargo-controllers=$(KARGO_LATCH_KARGO_CONTROLLERS)
        - --kargo-controller-regex=$(KARGO_LATCH_KARGO_CONTROLLER_REGEX)
        {{- with .shardFlag }}
        - {{ . | quote }}
        {{- end }}
        {{- range $flags }}
        - {{ . }}
        {{- end }}
        {{- range $c.namespaces }}
        - --namespace={{ . }}
        {{- end }}
        {{- range $c.args }}
        - {{ . | quote }}
        {{- end }}
        ports:
        {{- if $c.metrics.enabled }}
        - name: metrics
          containerPort: {{ $c.metrics.service.port }}
        {{- end }}
        - name: probes
          containerPort: 8081
        livenessProbe:
          httpGet:
            path: /healthz
            port: probes
          periodSeconds: 10
        readinessProbe:
          httpGet:
            path: /readyz
            port: probes
          periodSeconds: 5
        {{- with $c.resources }}
        resources:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $c.containerSecurityContext }}
        securityContext:
          {{- toYaml . | nindent 10 }}
        {{- end }}
{{- end -}}
