{{/*
Named templates. The relay's container, volumes and security context take a dict
  (dict "values" <this chart's values> "root" <the calling chart's top context>)
so that an application chart can render them with its own release; see
"outbox-relay.sidecar" at the end of this file.
*/}}

{{/* The image tag when image.tag is empty; equal to Chart.yaml's appVersion (a test checks). */}}
{{- define "outbox-relay.appVersion" -}}0.1.0{{- end -}}

{{- define "outbox-relay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "outbox-relay.fullname" -}}
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

{{- define "outbox-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outbox-relay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outbox-relay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "outbox-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: outbox
{{- end -}}

{{- define "outbox-relay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "outbox-relay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image reference from an image block and the relay's default tag: (dict "image" ... "fallback" ...) */}}
{{- define "outbox-relay.imageRef" -}}
{{- $repo := .image.repository | default .fallback.repository -}}
{{- $tag := .image.tag | default .fallback.tag | default (include "outbox-relay.appVersion" .) -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* A value as an environment variable string: maps and lists as JSON, whole numbers without an exponent. */}}
{{- define "outbox-relay.envValue" -}}
{{- if or (kindIs "map" .) (kindIs "slice" .) -}}
{{- toJson . -}}
{{- else if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* Pod-level security context: the "restricted" Pod Security Standard. */}}
{{- define "outbox-relay.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .securityContext.runAsUser | int64 }}
runAsGroup: {{ .securityContext.runAsGroup | int64 }}
fsGroup: {{ .securityContext.runAsGroup | int64 }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security context: restricted on its own, so it holds in any pod (sidecar). */}}
{{- define "outbox-relay.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .securityContext.runAsUser | int64 }}
runAsGroup: {{ .securityContext.runAsGroup | int64 }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "outbox-relay.usesSsl" -}}
{{- if has .kafka.securityProtocol (list "SSL" "SASL_SSL") -}}true{{- end -}}
{{- end -}}

{{- define "outbox-relay.usesSasl" -}}
{{- if hasPrefix "SASL_" .kafka.securityProtocol -}}true{{- end -}}
{{- end -}}

{{/* Environment of the relay container: (dict "values" ...). Names are the relay's settings. */}}
{{- define "outbox-relay.env" -}}
{{- $v := .values -}}
- name: OUTBOX_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required: a Secret holding the outbox database URL" $v.database.existingSecret | quote }}
      key: {{ $v.database.key | quote }}
- name: OUTBOX_KAFKA_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" $v.kafka.bootstrapServers | quote }}
- name: OUTBOX_KAFKA_SECURITY_PROTOCOL
  value: {{ $v.kafka.securityProtocol | quote }}
{{- if include "outbox-relay.usesSsl" $v }}
{{- if or $v.kafka.ssl.ca.secretName $v.kafka.ssl.ca.configMapName }}
- name: OUTBOX_KAFKA_SSL_CAFILE
  value: /etc/outbox-relay/kafka-ca/ca.crt
{{- end }}
{{- if $v.kafka.ssl.clientCert.secretName }}
- name: OUTBOX_KAFKA_SSL_CERTFILE
  value: /etc/outbox-relay/kafka-client/client.crt
- name: OUTBOX_KAFKA_SSL_KEYFILE
  value: /etc/outbox-relay/kafka-client/client.key
{{- end }}
{{- if not $v.kafka.ssl.checkHostname }}
- name: OUTBOX_KAFKA_SSL_CHECK_HOSTNAME
  value: "false"
{{- end }}
{{- end }}
{{- if include "outbox-relay.usesSasl" $v }}
- name: OUTBOX_KAFKA_SASL_MECHANISM
  value: {{ $v.kafka.sasl.mechanism | quote }}
- name: OUTBOX_KAFKA_SASL_USERNAME
  value: {{ required "kafka.sasl.username is required with a SASL protocol" $v.kafka.sasl.username | quote }}
- name: OUTBOX_KAFKA_SASL_PASSWORD_FILE
  value: /etc/outbox-relay/kafka-sasl/password
{{- end }}
- name: OUTBOX_SHARD_COUNT
  value: {{ $v.shardCount | int64 | quote }}
# The pod's own address, not 0.0.0.0: the kubelet's probes and Prometheus reach the pod
# IP, and with the host's network the endpoint would not open on every node address.
- name: OUTBOX_HTTP_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: OUTBOX_HTTP_PORT
  value: {{ $v.http.port | int64 | quote }}
- name: OUTBOX_LOG_LEVEL
  value: {{ $v.logLevel | quote }}
- name: OUTBOX_LOG_JSON
  value: {{ $v.logJson | toString | quote }}
- name: OUTBOX_REPLICA_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- if and .sidecar (not (hasKey $v.settings "active_replicas")) }}
# Sidecars: one relay per application pod, of which only this many hold shards; the
# others stand by with a heartbeat and take over within lease_ttl_s.
- name: OUTBOX_ACTIVE_REPLICAS
  value: {{ $v.sidecar.activeReplicas | int64 | quote }}
{{- end }}
{{- range $name, $value := $v.settings }}
- name: {{ printf "OUTBOX_%s" (upper $name) }}
  value: {{ include "outbox-relay.envValue" $value | quote }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes for the relay (and the consumer): (dict "values" ... "mode" <file mode>). */}}
{{- define "outbox-relay.volumes" -}}
{{- $v := .values -}}
- name: outbox-relay-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- if include "outbox-relay.usesSsl" $v }}
{{- if $v.kafka.ssl.ca.secretName }}
- name: outbox-relay-kafka-ca
  secret:
    secretName: {{ $v.kafka.ssl.ca.secretName | quote }}
    defaultMode: {{ .mode | int64 }}
    items:
      - key: {{ $v.kafka.ssl.ca.key | quote }}
        path: ca.crt
{{- else if $v.kafka.ssl.ca.configMapName }}
- name: outbox-relay-kafka-ca
  configMap:
    name: {{ $v.kafka.ssl.ca.configMapName | quote }}
    defaultMode: 292
    items:
      - key: {{ $v.kafka.ssl.ca.key | quote }}
        path: ca.crt
{{- end }}
{{- if $v.kafka.ssl.clientCert.secretName }}
- name: outbox-relay-kafka-client
  secret:
    secretName: {{ $v.kafka.ssl.clientCert.secretName | quote }}
    defaultMode: {{ .mode | int64 }}
    items:
      - key: {{ $v.kafka.ssl.clientCert.certKey | quote }}
        path: client.crt
      - key: {{ $v.kafka.ssl.clientCert.keyKey | quote }}
        path: client.key
{{- end }}
{{- end }}
{{- if include "outbox-relay.usesSasl" $v }}
- name: outbox-relay-kafka-sasl
  secret:
    secretName: {{ required "kafka.sasl.passwordSecret.name is required with a SASL protocol" $v.kafka.sasl.passwordSecret.name | quote }}
    defaultMode: {{ .mode | int64 }}
    items:
      - key: {{ $v.kafka.sasl.passwordSecret.key | quote }}
        path: password
{{- end }}
{{- end -}}

{{- define "outbox-relay.volumeMounts" -}}
{{- $v := .values -}}
- name: outbox-relay-tmp
  mountPath: /tmp
{{- if include "outbox-relay.usesSsl" $v }}
{{- if or $v.kafka.ssl.ca.secretName $v.kafka.ssl.ca.configMapName }}
- name: outbox-relay-kafka-ca
  mountPath: /etc/outbox-relay/kafka-ca
  readOnly: true
{{- end }}
{{- if $v.kafka.ssl.clientCert.secretName }}
- name: outbox-relay-kafka-client
  mountPath: /etc/outbox-relay/kafka-client
  readOnly: true
{{- end }}
{{- end }}
{{- if include "outbox-relay.usesSasl" $v }}
- name: outbox-relay-kafka-sasl
  mountPath: /etc/outbox-relay/kafka-sasl
  readOnly: true
{{- end }}
{{- end -}}

{{/* The relay container: (dict "values" ... "sidecar" true|false). */}}
{{- define "outbox-relay.container" -}}
{{- $v := .values -}}
- name: outbox-relay
  image: {{ include "outbox-relay.imageRef" (dict "image" $v.image "fallback" $v.image) | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args: ["run"]
  env:
    {{- include "outbox-relay.env" . | nindent 4 }}
  ports:
    - name: relay-http
      containerPort: {{ $v.http.port | int64 }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: relay-http
    initialDelaySeconds: {{ $v.probes.liveness.initialDelaySeconds }}
    periodSeconds: {{ $v.probes.liveness.periodSeconds }}
    timeoutSeconds: {{ $v.probes.liveness.timeoutSeconds }}
    failureThreshold: {{ $v.probes.liveness.failureThreshold }}
  {{- if and $v.probes.readiness.enabled (or (not .sidecar) $v.sidecar.readinessProbe) }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: relay-http
    initialDelaySeconds: {{ $v.probes.readiness.initialDelaySeconds }}
    periodSeconds: {{ $v.probes.readiness.periodSeconds }}
    timeoutSeconds: {{ $v.probes.readiness.timeoutSeconds }}
    failureThreshold: {{ $v.probes.readiness.failureThreshold }}
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "outbox-relay.containerSecurityContext" $v | nindent 4 }}
  volumeMounts:
    {{- include "outbox-relay.volumeMounts" . | nindent 4 }}
{{- end -}}

{{/*
For application charts: the relay as a sidecar container in the application's own pod.

  # Chart.yaml of the application
  dependencies:
    - name: outbox-relay
      version: 0.1.0
      repository: file://../outbox-relay   # or wherever the chart is published
      alias: outboxRelay

  # values.yaml of the application
  outboxRelay:
    mode: sidecar                          # the subchart renders nothing of its own
    database: {existingSecret: orders-db, key: url}
    kafka: {bootstrapServers: "kafka:9093", securityProtocol: SSL, ...}

  # templates/deployment.yaml of the application, in the pod spec
  containers:
    - name: app
      ...
    {{- include "outbox-relay.sidecar" (dict "values" .Values.outboxRelay "root" $) | nindent 4 }}
  volumes:
    {{- include "outbox-relay.sidecarVolumes" (dict "values" .Values.outboxRelay "root" $) | nindent 4 }}

A worked example: examples/app-with-sidecar in this chart.
*/}}
{{- define "outbox-relay.sidecar" -}}
{{- include "outbox-relay.container" (dict "values" .values "sidecar" true) -}}
{{- end -}}

{{- define "outbox-relay.sidecarVolumes" -}}
{{- include "outbox-relay.volumes" (dict "values" .values "mode" .values.sidecar.secretFileMode) -}}
{{- end -}}
