{{/*
Names, labels, the image reference, and the environment both Deployments
share. Every secret value reaches a container through a secretKeyRef; the
ConfigMaps carry only non-secret settings.
*/}}

{{- define "runnel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped prefix for every resource name (at most 63 characters). */}}
{{- define "runnel.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Component names leave room for the "-dispatcher"/"-worker" suffixes. */}}
{{- define "runnel.dispatcher.fullname" -}}
{{- printf "%s-dispatcher" (include "runnel.fullname" . | trunc 52 | trimSuffix "-") -}}
{{- end -}}

{{- define "runnel.worker.fullname" -}}
{{- printf "%s-worker" (include "runnel.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}

{{/* Usage: include "runnel.suffixed" (list BASE "suffix"): BASE-suffix in 63 characters. */}}
{{- define "runnel.suffixed" -}}
{{- $sfx := index . 1 -}}
{{- printf "%s-%s" (index . 0 | trunc (int (sub 62 (len $sfx))) | trimSuffix "-") $sfx -}}
{{- end -}}

{{- define "runnel.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "runnel.labels" -}}
helm.sh/chart: {{ include "runnel.chart" . }}
{{ include "runnel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: runnel
{{- end -}}

{{- define "runnel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runnel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Usage: include "runnel.componentLabels" (list . "worker") */}}
{{- define "runnel.componentLabels" -}}
{{ include "runnel.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "runnel.componentSelectorLabels" -}}
{{ include "runnel.selectorLabels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "runnel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "runnel.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "runnel.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "runnel.secretName" -}}
{{- default (include "runnel.suffixed" (list (include "runnel.fullname" .) "secrets")) .Values.secret.existingSecret -}}
{{- end -}}

{{/* True ("true") when the chart renders its own Secret. */}}
{{- define "runnel.createSecret" -}}
{{- if and (not .Values.secret.existingSecret) (or .Values.sealing.enabled .Values.webhooks.enabled .Values.dispatcher.auth.enabled .Values.redis.auth.enabled .Values.kafka.sasl.enabled .Values.kafka.secretProperties) -}}
true
{{- end -}}
{{- end -}}

{{/*
The dispatcher's API token: dispatcher.auth.token when set, else the one
the release's Secret already holds (upgrades keep it), else a new random
one (install; helm template renders a fresh one each time).
*/}}
{{- define "runnel.apiToken" -}}
{{- if .Values.dispatcher.auth.token -}}
{{- .Values.dispatcher.auth.token -}}
{{- else -}}
{{- $s := lookup "v1" "Secret" .Release.Namespace (include "runnel.secretName" .) -}}
{{- $key := .Values.secret.keys.apiToken -}}
{{- if and $s $s.data (hasKey $s.data $key) -}}
{{- index $s.data $key | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* True when the Secret holds secret librdkafka properties. */}}
{{- define "runnel.hasKafkaSecretProperties" -}}
{{- if .Values.secret.existingSecret -}}
{{- if .Values.secret.hasKafkaSecretProperties }}true{{ end -}}
{{- else if .Values.kafka.secretProperties -}}
true
{{- end -}}
{{- end -}}

{{/* Public librdkafka properties as "k=v;k=v" (keys sorted). */}}
{{- define "runnel.kafkaProperties" -}}
{{- $parts := list -}}
{{- range $k, $v := .Values.kafka.properties -}}
{{- if or (contains ";" (toString $v)) (contains ";" $k) -}}
{{- fail (printf "kafka.properties.%s: values must not contain \";\" (it separates properties in RUNNEL_KAFKA_PROPERTIES)" $k) -}}
{{- end -}}
{{- $parts = append $parts (printf "%s=%s" $k (include "runnel.scalar" $v)) -}}
{{- end -}}
{{- join ";" $parts -}}
{{- end -}}

{{/*
Where RUNNEL_KAFKA_PROPERTIES comes from:
  plain   - no secret in it: the ConfigMap;
  secret  - one Secret key holding the whole list (the chart writes it when it
            creates the Secret; an existing Secret with
            secret.kafkaPropertiesFromSecret);
  compose - an existing Secret with separate SASL/secret-property keys: the
            kubelet joins them from helper variables ($(NAME)).
The worker wipes RUNNEL_KAFKA_PROPERTIES, RUNNEL_REDIS_URL, RUNNEL_JOB_KEY and
RUNNEL_WEBHOOK_SECRET from its environment at start; helper variables stay,
so "secret" is preferred.
*/}}
{{- define "runnel.kafkaMode" -}}
{{- $secretParts := or .Values.kafka.sasl.enabled (include "runnel.hasKafkaSecretProperties" .) -}}
{{- if .Values.secret.existingSecret -}}
{{- if .Values.secret.kafkaPropertiesFromSecret }}secret{{ else if $secretParts }}compose{{ else }}plain{{ end -}}
{{- else -}}
{{- if $secretParts }}secret{{ else }}plain{{ end -}}
{{- end -}}
{{- end -}}

{{/* Where RUNNEL_REDIS_URL comes from: plain (ConfigMap), secret or compose, as above. */}}
{{- define "runnel.redisMode" -}}
{{- if not .Values.redis.auth.enabled -}}
plain
{{- else if or (not .Values.secret.existingSecret) .Values.redis.auth.urlFromSecret -}}
secret
{{- else -}}
compose
{{- end -}}
{{- end -}}

{{/* The whole librdkafka property list with its secrets, for a chart-made Secret. */}}
{{- define "runnel.kafkaSecretList" -}}
{{- $parts := list -}}
{{- with include "runnel.kafkaProperties" . }}{{ $parts = append $parts . }}{{ end -}}
{{- if .Values.kafka.sasl.enabled -}}
{{- $parts = append $parts (printf "sasl.username=%s" .Values.kafka.sasl.username) -}}
{{- $parts = append $parts (printf "sasl.password=%s" .Values.kafka.sasl.password) -}}
{{- end -}}
{{- range $k, $v := .Values.kafka.secretProperties -}}
{{- $parts = append $parts (printf "%s=%s" $k (include "runnel.scalar" $v)) -}}
{{- end -}}
{{- join ";" $parts -}}
{{- end -}}

{{- define "runnel.redisPlainUrl" -}}
{{- printf "redis://%s:%s/%s" .Values.redis.host (include "runnel.scalar" .Values.redis.port) (include "runnel.scalar" .Values.redis.db) -}}
{{- end -}}

{{/*
Checks that span several values; every template includes it so a bad
combination fails the render with a message naming the value to fix.
*/}}
{{- define "runnel.validate" -}}
{{- $mode := .Values.worker.sandbox.mode -}}
{{- if not (has $mode (list "bwrap" "process")) -}}
{{- fail (printf "worker.sandbox.mode must be \"bwrap\" or \"process\", not %q" $mode) -}}
{{- end -}}
{{- if and (eq $mode "process") (not .Values.worker.sandbox.iUnderstandProcessModeIsolatesNothing) -}}
{{- fail "worker.sandbox.mode=process runs agents with NO isolation: an agent can read the worker's Kafka, Redis and job-key secrets and every other run's files. Use it only for trusted agents, and acknowledge it with worker.sandbox.iUnderstandProcessModeIsolatesNothing=true" -}}
{{- end -}}
{{- if not (has .Values.worker.sandbox.network (list "none" "host")) -}}
{{- fail (printf "worker.sandbox.network must be \"none\" or \"host\", not %q" .Values.worker.sandbox.network) -}}
{{- end -}}
{{- $drain := int .Values.worker.drainSec -}}
{{- if lt $drain 0 -}}
{{- fail "worker.drainSec must be >= 0" -}}
{{- end -}}
{{- if le (int (include "runnel.worker.terminationGracePeriodSeconds" .)) $drain -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%s) must be greater than worker.drainSec (%d): the kubelet would kill workers in the middle of their drain" (include "runnel.worker.terminationGracePeriodSeconds" .) $drain) -}}
{{- end -}}
{{- if lt (int .Values.worker.slots) 1 -}}
{{- fail "worker.slots must be >= 1" -}}
{{- end -}}
{{- $min := int .Values.worker.autoscaling.minReplicas -}}
{{- $max := int .Values.worker.autoscaling.maxReplicas -}}
{{- if or (lt $max 1) (gt $min $max) -}}
{{- fail (printf "worker.autoscaling: need 1 <= maxReplicas and minReplicas <= maxReplicas (got min %d, max %d)" $min $max) -}}
{{- end -}}
{{- if and (not .Values.keda.enabled) .Values.hpa.enabled (lt $min 1) -}}
{{- fail "worker.autoscaling.minReplicas must be >= 1 for the HPA; scaling to zero needs keda.enabled=true" -}}
{{- end -}}
{{- if and .Values.sealing.enabled (not .Values.secret.existingSecret) -}}
{{- if not (regexMatch "^[0-9a-fA-F]{64}$" (toString .Values.sealing.key)) -}}
{{- fail "sealing.key must be 64 hex characters (32 bytes), e.g. from `openssl rand -hex 32`, or use secret.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.webhooks.enabled (not .Values.secret.existingSecret) (not .Values.webhooks.secret) -}}
{{- fail "webhooks.enabled needs webhooks.secret (or secret.existingSecret)" -}}
{{- end -}}
{{- if and .Values.redis.cluster (or (ne (include "runnel.scalar" .Values.redis.db) "0") (and .Values.redis.auth.enabled .Values.redis.auth.urlFromSecret (regexMatch "/0*[1-9][0-9]*$" (toString .Values.redis.auth.url)))) -}}
{{- fail "redis.cluster needs database 0 (redis.db, and the path of redis.auth.url): a Redis Cluster has no other" -}}
{{- end -}}
{{- if and .Values.redis.auth.enabled (not .Values.secret.existingSecret) -}}
{{- if and .Values.redis.auth.urlFromSecret (not (hasPrefix "redis://" (toString .Values.redis.auth.url))) -}}
{{- fail "redis.auth.urlFromSecret needs redis.auth.url (redis://:password@host:port/db) or secret.existingSecret" -}}
{{- end -}}
{{- if and (not .Values.redis.auth.urlFromSecret) (not .Values.redis.auth.password) -}}
{{- fail "redis.auth.enabled needs redis.auth.password (or secret.existingSecret)" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.secret.existingSecret) -}}
{{- if or (not .Values.kafka.sasl.username) (not .Values.kafka.sasl.password) -}}
{{- fail "kafka.sasl.enabled needs kafka.sasl.username and kafka.sasl.password (or secret.existingSecret)" -}}
{{- end -}}
{{- if or (contains ";" (toString .Values.kafka.sasl.username)) (contains ";" (toString .Values.kafka.sasl.password)) -}}
{{- fail "kafka.sasl.username/password must not contain \";\" (it separates properties in RUNNEL_KAFKA_PROPERTIES)" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.secret.existingSecret .Values.secret.kafkaPropertiesFromSecret .Values.kafka.properties -}}
{{- fail "secret.kafkaPropertiesFromSecret takes the whole librdkafka list from the Secret: put kafka.properties into it and leave kafka.properties empty" -}}
{{- end -}}
{{- range $k, $v := .Values.kafka.secretProperties -}}
{{- if or (contains ";" (toString $v)) (contains ";" $k) -}}
{{- fail (printf "kafka.secretProperties.%s must not contain \";\"" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "runnel.worker.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.worker.terminationGracePeriodSeconds -}}
{{- add (int64 .Values.worker.drainSec) (int64 .Values.worker.terminationMarginSec) -}}
{{- else -}}
{{- int64 .Values.worker.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/*
Environment entries that carry secrets, for both Deployments. Usage:
include "runnel.secretEnv" (dict "ctx" . "component" "worker").
Later entries may refer to earlier ones with $(NAME): the kubelet expands
them when it starts the container, so the composed Redis URL and Kafka
properties exist only in the process environment, never in an object.
*/}}
{{- define "runnel.secretEnv" -}}
{{- $ := .ctx -}}
{{- $secret := include "runnel.secretName" $ -}}
{{- $keys := $.Values.secret.keys -}}
{{- if $.Values.sealing.enabled }}
- name: RUNNEL_JOB_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.jobKey }}
{{- end }}
{{- if and (eq .component "worker") $.Values.webhooks.enabled }}
- name: RUNNEL_WEBHOOK_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.webhookSecret }}
{{- end }}
{{- if and (eq .component "dispatcher") $.Values.dispatcher.auth.enabled }}
- name: RUNNEL_API_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.apiToken }}
{{- end }}
{{- $redisMode := include "runnel.redisMode" $ }}
{{- if eq $redisMode "secret" }}
- name: RUNNEL_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.redisUrl }}
{{- else if eq $redisMode "compose" }}
- name: RUNNEL_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.redisPassword }}
- name: RUNNEL_REDIS_URL
  value: {{ printf "redis://:$(RUNNEL_REDIS_PASSWORD)@%s:%s/%s" $.Values.redis.host (include "runnel.scalar" $.Values.redis.port) (include "runnel.scalar" $.Values.redis.db) | quote }}
{{- end }}
{{- $kafkaMode := include "runnel.kafkaMode" $ }}
{{- if eq $kafkaMode "secret" }}
- name: RUNNEL_KAFKA_PROPERTIES
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.kafkaProperties }}
{{- else if eq $kafkaMode "compose" }}
{{- $parts := list -}}
{{- if include "runnel.kafkaProperties" $ }}
{{- $parts = append $parts "$(RUNNEL_KAFKA_PUBLIC_PROPERTIES)" }}
- name: RUNNEL_KAFKA_PUBLIC_PROPERTIES
  valueFrom:
    configMapKeyRef:
      name: {{ include (printf "runnel.%s.fullname" .component) $ }}
      key: RUNNEL_KAFKA_PUBLIC_PROPERTIES
{{- end }}
{{- if $.Values.kafka.sasl.enabled }}
{{- $parts = append $parts "sasl.username=$(RUNNEL_KAFKA_SASL_USERNAME)" }}
{{- $parts = append $parts "sasl.password=$(RUNNEL_KAFKA_SASL_PASSWORD)" }}
- name: RUNNEL_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.kafkaSaslUsername }}
- name: RUNNEL_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.kafkaSaslPassword }}
{{- end }}
{{- if include "runnel.hasKafkaSecretProperties" $ }}
{{- $parts = append $parts "$(RUNNEL_KAFKA_SECRET_PROPERTIES)" }}
- name: RUNNEL_KAFKA_SECRET_PROPERTIES
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.kafkaSecretProperties }}
{{- end }}
- name: RUNNEL_KAFKA_PROPERTIES
  value: {{ join ";" $parts | quote }}
{{- end }}
{{- end -}}

{{/* ConfigMap entries both programs read. */}}
{{- define "runnel.commonConfig" -}}
RUNNEL_LOG_LEVEL: {{ .Values.logLevel | quote }}
RUNNEL_KAFKA_BROKERS: {{ .Values.kafka.brokers | quote }}
RUNNEL_JOBS_TOPIC: {{ .Values.kafka.jobsTopic | quote }}
RUNNEL_KEY_PREFIX: {{ .Values.redis.keyPrefix | quote }}
RUNNEL_MAX_RUNTIME_SEC: {{ include "runnel.scalar" .Values.runs.maxRuntimeSec | quote }}
RUNNEL_RETENTION_SEC: {{ include "runnel.scalar" .Values.runs.retentionSec | quote }}
{{- if not .Values.redis.auth.enabled }}
RUNNEL_REDIS_URL: {{ include "runnel.redisPlainUrl" . | quote }}
{{- end }}
{{- $props := include "runnel.kafkaProperties" . }}
{{- $kafkaMode := include "runnel.kafkaMode" . }}
{{- if and $props (eq $kafkaMode "compose") }}
RUNNEL_KAFKA_PUBLIC_PROPERTIES: {{ $props | quote }}
{{- else if and $props (eq $kafkaMode "plain") }}
RUNNEL_KAFKA_PROPERTIES: {{ $props | quote }}
{{- end }}
{{- end -}}

{{/* Pod annotations that roll the pods when their configuration changes. */}}
{{- define "runnel.checksums" -}}
checksum/config: {{ include (print .ctx.Template.BasePath "/configmap.yaml") .ctx | sha256sum }}
{{- if include "runnel.createSecret" .ctx }}
checksum/secret: {{ include (print .ctx.Template.BasePath "/secret.yaml") .ctx | sha256sum }}
{{- end }}
{{- end -}}

{{/*
One NetworkPolicy egress rule to the given peers and TCP ports. An empty peer
list fails the render: an egress rule without "to" would allow every
destination on those ports, which is not what the setting promises.
*/}}
{{- define "runnel.egressRule" -}}
{{- if not .to -}}
{{- fail (printf "networkPolicy.enabled needs %s (the peers to allow; e.g. [{ipBlock: {cidr: 10.0.0.0/16}}])" .what) -}}
{{- end -}}
- ports:
    {{- range .ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
  to:
    {{- toYaml .to | nindent 4 }}
{{- end -}}

{{/* A YAML scalar as text; whole numbers never in exponent form (1048576, not 1.048576e+06). */}}
{{- define "runnel.scalar" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}
