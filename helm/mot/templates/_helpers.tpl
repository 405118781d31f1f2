{{/*
Naming. The RayService name must be a DNS-1035 label of at most 47 characters (KubeRay appends a
6-character suffix for its RayCluster and "-serve-svc" for services), so the full name is cut to 47
and prefixed with "mot-" when it would not start with a letter.
*/}}
{{- define "mot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 47 | trimSuffix "-" }}
{{- end }}

{{- define "mot.fullname" -}}
{{- $name := "" }}
{{- if .Values.fullnameOverride }}
{{- $name = .Values.fullnameOverride }}
{{- else }}
{{- $base := default .Chart.Name .Values.nameOverride }}
{{- if contains $base .Release.Name }}
{{- $name = .Release.Name }}
{{- else }}
{{- $name = printf "%s-%s" .Release.Name $base }}
{{- end }}
{{- end }}
{{- if not (regexMatch "^[a-z]" $name) }}
{{- $name = printf "mot-%s" $name }}
{{- end }}
{{- $name | lower | trunc 47 | trimSuffix "-" }}
{{- end }}

{{- define "mot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. KubeRay adds its own (ray.io/*) to the Ray pods. */}}
{{- define "mot.labels" -}}
helm.sh/chart: {{ include "mot.chart" . }}
{{ include "mot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mot
{{- end }}

{{- define "mot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The pods behind the gRPC Service: Ray worker pods of this release. KubeRay may set
app.kubernetes.io/name on Ray pods itself, so the selector uses instance + component only.
*/}}
{{- define "mot.servingSelectorLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: ray-worker
{{- end }}

{{- define "mot.image" -}}
{{- $tag := .Values.image.tag | default (printf "%s-%s" .Chart.AppVersion .Values.image.variant) }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{/* The Ray Serve application builder; must equal services.config.IMPORT_PATH (checked by tests/delivery). */}}
{{- define "mot.importPath" -}}
services.app:build_app
{{- end }}

{{/*
The Ray Serve deployments of the application, with the names services/app.py gives them: one per
model, "source", "target-<i>" for the i-th entry of mot.targets (0-based) and "translator" (only when
some target has a translator), then the gRPC "ingress" (no model).
Output: a JSON list of {name, model, gpus, cpus, minReplicas, maxReplicas, override}; "override" is the
entry for serveConfigV2 applications[].deployments. Defaults mirror services/config.py Placement.
*/}}
{{- define "mot.deployments" -}}
{{- $mot := .Values.mot }}
{{- $specs := list (dict "name" "source" "model" $mot.source.name "placement" $mot.source.placement) }}
{{- range $i, $t := $mot.targets }}
{{- $specs = append $specs (dict "name" (printf "target-%d" $i) "model" $t.name "placement" $t.placement) }}
{{- end }}
{{- $hasTranslator := false }}
{{- range $mot.targets }}{{- if .translator }}{{- $hasTranslator = true }}{{- end }}{{- end }}
{{- if $hasTranslator }}
{{- $specs = append $specs (dict "name" "translator" "model" "" "placement" $mot.translator_placement) }}
{{- end }}
{{- $out := list }}
{{- range $specs }}
{{- $p := .placement | default dict }}
{{- $gpus := 0 }}{{- if hasKey $p "num_gpus" }}{{- $gpus = $p.num_gpus }}{{- end }}
{{- $cpus := 1 }}{{- if hasKey $p "num_cpus" }}{{- $cpus = $p.num_cpus }}{{- end }}
{{- $replicas := 1 }}{{- if hasKey $p "num_replicas" }}{{- $replicas = $p.num_replicas }}{{- end }}
{{- $override := dict "name" .name "ray_actor_options" (dict "num_gpus" $gpus "num_cpus" $cpus) }}
{{- $min := $replicas }}
{{- $max := $replicas }}
{{- if kindIs "map" $p.autoscaling }}
{{- $a := $p.autoscaling }}
{{- $min = 1 }}{{- if hasKey $a "min_replicas" }}{{- $min = $a.min_replicas }}{{- end }}
{{- $max = 1 }}{{- if hasKey $a "max_replicas" }}{{- $max = $a.max_replicas }}{{- end }}
{{- $target := 2.0 }}{{- if hasKey $a "target_ongoing_requests" }}{{- $target = $a.target_ongoing_requests }}{{- end }}
{{- $_ := set $override "autoscaling_config" (dict "min_replicas" $min "max_replicas" $max "target_ongoing_requests" $target) }}
{{- else }}
{{- $_ := set $override "num_replicas" $replicas }}
{{- end }}
{{- $override = merge $override (deepCopy ($.Values.serve.deploymentOptions | default dict)) }}
{{- $out = append $out (dict "name" .name "model" .model "gpus" $gpus "cpus" $cpus "minReplicas" $min "maxReplicas" $max "override" $override) }}
{{- end }}
{{- $ing := .Values.serve.ingress }}
{{- $ingOverride := dict "name" "ingress" "num_replicas" (int $ing.numReplicas) "ray_actor_options" (dict "num_cpus" $ing.numCpus) }}
{{- $out = append $out (dict "name" "ingress" "model" "" "gpus" 0 "cpus" $ing.numCpus "minReplicas" (int $ing.numReplicas) "maxReplicas" (int $ing.numReplicas) "override" $ingOverride) }}
{{- toJson $out }}
{{- end }}

{{/*
GPUs the models need: "min" with every deployment at its minimum replica count, "max" at its
maximum. Output: JSON {"min": float, "max": float, "largest": float (most GPUs of one replica)}.
*/}}
{{- define "mot.gpuDemand" -}}
{{- $acc := dict "min" 0.0 "max" 0.0 "largest" 0.0 }}
{{- range (include "mot.deployments" . | fromJsonArray) }}
{{- $_ := set $acc "min" (addf $acc.min (mulf .gpus .minReplicas)) }}
{{- $_ = set $acc "max" (addf $acc.max (mulf .gpus .maxReplicas)) }}
{{- $_ = set $acc "largest" (maxf $acc.largest .gpus) }}
{{- end }}
{{- toJson $acc }}
{{- end }}

{{/*
Worker groups with their replica counts resolved. "auto" (allowed on one GPU group) sizes the group
to the models: without the Ray autoscaler every deployment's peak (max replicas) gets its GPUs up
front; with it, the group starts at the minimum and may grow to the peak. So a new target model with
num_gpus: 1 adds one GPU worker, with no template change.
Output: JSON list of {name, gpus, replicas, minReplicas, maxReplicas, spec} (spec: the values entry).
*/}}
{{- define "mot.workerGroups" -}}
{{- $demand := include "mot.gpuDemand" . | fromJson }}
{{- $autoscale := .Values.ray.enableInTreeAutoscaling }}
{{- $out := list }}
{{- $autoGroups := 0 }}
{{- range .Values.ray.workerGroups }}
{{- $g := . }}
{{- $gpus := .gpusPerWorker | default 0 }}
{{- $isAuto := or (eq (toString .replicas) "auto") (eq (toString .minReplicas) "auto") (eq (toString .maxReplicas) "auto") }}
{{- $replicas := 0 }}{{- $min := 0 }}{{- $max := 0 }}
{{- if $isAuto }}
{{- $autoGroups = add1 $autoGroups }}
{{- if le (float64 $gpus) 0.0 }}
{{- fail (printf "ray.workerGroups[%s]: replicas \"auto\" sizes a group by the models' GPUs; set gpusPerWorker > 0 or give replica counts" .name) }}
{{- end }}
{{- $peak := ceil (divf $demand.max $gpus) | int }}
{{- $floor := ceil (divf $demand.min $gpus) | int }}
{{- if $autoscale }}
{{- $min = $floor }}{{- $replicas = $floor }}{{- $max = $peak }}
{{- else }}
{{- $min = $peak }}{{- $replicas = $peak }}{{- $max = $peak }}
{{- end }}
{{- else }}
{{- $replicas = int (.replicas | default 0) }}
{{- $min = $replicas }}{{- if hasKey . "minReplicas" }}{{- $min = int .minReplicas }}{{- end }}
{{- $max = $replicas }}{{- if hasKey . "maxReplicas" }}{{- $max = int .maxReplicas }}{{- end }}
{{- end }}
{{- $out = append $out (dict "name" .name "gpus" $gpus "replicas" $replicas "minReplicas" $min "maxReplicas" $max "spec" $g) }}
{{- end }}
{{- if gt $autoGroups 1 }}
{{- fail "ray.workerGroups: replicas \"auto\" may be used on one worker group only" }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* Fail early (at helm install/template time) on values the service or KubeRay would reject later. */}}
{{- define "mot.validate" -}}
{{- $seen := dict }}
{{- range .Values.mot.targets }}
{{- if hasKey $seen .name }}
{{- fail (printf "mot.targets: target model %q is listed twice" .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- if eq (int .Values.service.grpcPort) (int .Values.metrics.port) }}
{{- fail "service.grpcPort and metrics.port must differ" }}
{{- end }}
{{- range (include "mot.deployments" . | fromJsonArray) }}
{{- if kindIs "map" .override.autoscaling_config }}
{{- if lt (float64 .override.autoscaling_config.max_replicas) (float64 .override.autoscaling_config.min_replicas) }}
{{- fail (printf "deployment %s (%s): autoscaling max_replicas must be >= min_replicas" .name .model) }}
{{- end }}
{{- end }}
{{- end }}
{{- $demand := include "mot.gpuDemand" . | fromJson }}
{{- $groups := include "mot.workerGroups" . | fromJsonArray }}
{{- $capacity := 0.0 }}
{{- $largest := 0.0 }}
{{- range $groups }}
{{- if gt (int .minReplicas) (int .replicas) }}
{{- fail (printf "ray.workerGroups[%s]: minReplicas must be <= replicas" .name) }}
{{- end }}
{{- if lt (int .maxReplicas) (int .replicas) }}
{{- fail (printf "ray.workerGroups[%s]: maxReplicas must be >= replicas" .name) }}
{{- end }}
{{- $count := ternary .maxReplicas .replicas (eq $.Values.ray.enableInTreeAutoscaling true) }}
{{- $capacity = addf $capacity (mulf .gpus $count) }}
{{- $largest = maxf $largest .gpus }}
{{- end }}
{{- if gt $demand.largest $largest }}
{{- fail (printf "a model asks for %v GPUs per replica but no worker group has that many (largest gpusPerWorker: %v)" $demand.largest $largest) }}
{{- end }}
{{- if gt $demand.max $capacity }}
{{- fail (printf "the models need %v GPUs at peak (sum of num_gpus x replicas) but the worker groups provide %v; add GPU workers or use replicas: auto" $demand.max $capacity) }}
{{- end }}
{{- if and .Values.redis.tls.enabled .Values.redis.enabled (not .Values.redis.tls.existingSecret) }}
{{- fail "redis.tls.enabled with the in-chart Redis needs redis.tls.existingSecret (a Secret with tls.crt, tls.key and ca.crt)" }}
{{- end }}
{{- if and (not .Values.redis.enabled) (not .Values.redis.external.existingSecret) (not .Values.redis.external.url) }}
{{- fail "redis.enabled is false: set redis.external.existingSecret (a Secret holding the Redis URL) or redis.external.url" }}
{{- end }}
{{- end }}

{{/* Secrets. */}}
{{- define "mot.authSecretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "mot.fullname" .)) }}
{{- end }}

{{/* At most 47 characters: a StatefulSet name longer than 52 breaks its controller-revision-hash label. */}}
{{- define "mot.redisName" -}}
{{- printf "%s-redis" (include "mot.fullname" . | trunc 41 | trimSuffix "-") }}
{{- end }}

{{- define "mot.redisPasswordSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (include "mot.redisName" .) }}
{{- end }}

{{- define "mot.redisExternalSecretName" -}}
{{- .Values.redis.external.existingSecret | default (printf "%s-redis-external" (include "mot.fullname" .)) }}
{{- end }}

{{- define "mot.redisCaPath" -}}
/etc/mot/redis-tls/ca.crt
{{- end }}

{{/*
A random secret value that survives upgrades: reuse the value of the live Secret when there is one
(lookup returns nothing in offline rendering, then a new value is generated).
Call with (list $root secretName key length).
*/}}
{{- define "mot.persistentRandom" -}}
{{- $root := index . 0 }}{{- $name := index . 1 }}{{- $key := index . 2 }}{{- $length := index . 3 }}
{{- $live := lookup "v1" "Secret" $root.Release.Namespace $name }}
{{- if and $live $live.data (hasKey $live.data $key) }}
{{- index $live.data $key }}
{{- else }}
{{- randAlphaNum $length | b64enc }}
{{- end }}
{{- end }}

{{/* Environment of every Ray container (head and workers): the service reads its secrets from here. */}}
{{- define "mot.rayEnv" -}}
- name: TOKENIZERS_PARALLELISM
  value: "false"
{{- if .Values.modelCache.enabled }}
- name: MOT_HOME
  value: {{ .Values.modelCache.mountPath | quote }}
- name: HF_HOME
  value: {{ printf "%s/huggingface" .Values.modelCache.mountPath | quote }}
{{- end }}
{{- if .Values.redis.enabled }}
- name: MOT_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "mot.redisPasswordSecretName" . }}
      key: {{ .Values.redis.auth.existingSecretKey }}
- name: MOT_REDIS_URL
  {{- $host := printf "%s.%s.svc" (include "mot.redisName" .) .Release.Namespace }}
  {{- if .Values.redis.tls.enabled }}
  value: {{ printf "rediss://:$(MOT_REDIS_PASSWORD)@%s:%d/%d?ssl_ca_certs=%s" $host (int .Values.redis.port) (int .Values.redis.db) (include "mot.redisCaPath" .) | quote }}
  {{- else }}
  value: {{ printf "redis://:$(MOT_REDIS_PASSWORD)@%s:%d/%d" $host (int .Values.redis.port) (int .Values.redis.db) | quote }}
  {{- end }}
{{- else }}
- name: MOT_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "mot.redisExternalSecretName" . }}
      key: {{ .Values.redis.external.existingSecretKey }}
{{- end }}
{{- if .Values.auth.enabled }}
- name: MOT_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "mot.authSecretName" . }}
      key: {{ .Values.auth.existingSecretKey }}
{{- end }}
{{- if .Values.huggingface.tokenSecret }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.huggingface.tokenSecret }}
      key: {{ .Values.huggingface.tokenSecretKey }}
{{- end }}
{{- if .Values.huggingface.offline }}
- name: HF_HUB_OFFLINE
  value: "1"
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "mot.rayVolumeMounts" -}}
- name: dshm
  mountPath: /dev/shm
{{- if .Values.modelCache.enabled }}
- name: model-cache
  mountPath: {{ .Values.modelCache.mountPath }}
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
- name: redis-tls
  mountPath: {{ dir (include "mot.redisCaPath" .) }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "mot.rayVolumes" -}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.ray.shmSize }}
{{- if .Values.modelCache.enabled }}
- name: model-cache
  {{- if .Values.modelCache.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ .Values.modelCache.persistence.existingClaim | default (printf "%s-model-cache" (include "mot.fullname" .)) }}
  {{- else }}
  emptyDir:
    sizeLimit: {{ .Values.modelCache.sizeLimit }}
  {{- end }}
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
- name: redis-tls
  secret:
    secretName: {{ .Values.redis.tls.existingSecret }}
    items:
      - key: ca.crt
        path: {{ base (include "mot.redisCaPath" .) }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Container ports of the Ray pods. "metrics" is Ray's metrics exporter, where the service's metrics
(ray.serve.metrics) appear: KubeRay passes the port of that name as --metrics-export-port, and the
service config's metrics_port is the same value.
*/}}
{{- define "mot.servingPorts" -}}
- name: serve
  containerPort: {{ .Values.serve.httpPort }}
  protocol: TCP
- name: grpc
  containerPort: {{ .Values.service.grpcPort }}
  protocol: TCP
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}

{{/* Pod-level settings shared by the head and worker pods. Call with (dict "root" $ "scheduling" <group values>). */}}
{{- define "mot.rayPodCommon" -}}
{{- $root := .root }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.ray.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with $root.Values.ray.podSecurityContext }}
securityContext:
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
{{- end }}
