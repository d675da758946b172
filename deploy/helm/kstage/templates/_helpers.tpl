{{/* Names and labels, as `helm create` makes them. */}}
{{- define "kstage.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kstage.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kstage.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kstage.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kstage.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kstage.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kstage.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kstage.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret the chart makes of secretEnv. */}}
{{- define "kstage.secretName" -}}
{{- printf "%s-env" (include "kstage.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A duration of the config's supervisor section: the value given, else kstage's default
(settings/models.py SupervisorSettings); a number, or the chart cannot add it up.
*/}}
{{- define "kstage.graceSeconds" -}}
{{- $supervisor := .config.supervisor | default dict }}
{{- $value := .default }}
{{- if hasKey $supervisor .key }}
{{- $value = index $supervisor .key }}
{{- end }}
{{- if not (include "kstage.isNumber" $value) }}
{{- fail (printf "config.supervisor.%s must be a number of seconds (not %v): the chart derives terminationGracePeriodSeconds from it" .key $value) }}
{{- end }}
{{- $value }}
{{- end }}

{{/* "true" when the value is a number, or a string of one (`--set` gives 2.5 as a string). */}}
{{- define "kstage.isNumber" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) (and (kindIs "string" .) (regexMatch `^[0-9]+(\.[0-9]*)?$` .)) }}true{{ end }}
{{- end }}

{{/*
terminationGracePeriodSeconds: supervisor.shutdown_grace_s + supervisor.abort_grace_s of
the config in the ConfigMap (kstage's defaults 30 and 10 where it has none), rounded up,
plus terminationGraceMarginSeconds. kstage's watchdog ends a stop 5 s after both graces
(exit 1, naming where it is stuck): the margin gives it the time to do so and log it
before the kubelet's SIGKILL.
*/}}
{{- define "kstage.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "kstage.graceSeconds" (dict "config" .Values.config "key" "shutdown_grace_s" "default" 30) | float64 }}
{{- $abort := include "kstage.graceSeconds" (dict "config" .Values.config "key" "abort_grace_s" "default" 10) | float64 }}
{{- $margin := .Values.terminationGraceMarginSeconds | int }}
{{- if le $margin 5 }}
{{- fail (printf "terminationGraceMarginSeconds must exceed 5 (it is %d): kstage's watchdog ends a stop 5 s after its graces" $margin) }}
{{- end }}
{{- add (ceil (addf $shutdown $abort)) $margin }}
{{- end }}

{{/* The status server's port: config.service.http_port (kstage's default 9108). */}}
{{- define "kstage.httpPort" -}}
{{- $service := .Values.config.service | default dict }}
{{- $port := 9108 }}
{{- if hasKey $service "http_port" }}
{{- $port = index $service "http_port" }}
{{- end }}
{{- if not (include "kstage.isNumber" $port) }}
{{- fail (printf "config.service.http_port must be a number (not %v): the probes and the metrics Service use it" $port) }}
{{- end }}
{{- if eq ($port | int) 0 }}
{{- fail "config.service.http_port is 0 (no status server): the probes need /healthz and /readyz" }}
{{- end }}
{{- $port | int }}
{{- end }}

{{/* What the chart refuses to render: a config the probes or the grace period cannot work with. */}}
{{- define "kstage.checks" -}}
{{- $service := .Values.config.service | default dict }}
{{- if ne (toString (index $service "http_host" | default "")) "0.0.0.0" }}
{{- fail "config.service.http_host must be 0.0.0.0: the probes and Prometheus reach the status server on the pod's address (kstage binds 127.0.0.1 by default)" }}
{{- end }}
{{- $derived := list "KSTAGE_SUPERVISOR" "KSTAGE_SUPERVISOR__SHUTDOWN_GRACE_S" "KSTAGE_SUPERVISOR__ABORT_GRACE_S" "KSTAGE_SERVICE" "KSTAGE_SERVICE__HTTP_PORT" "KSTAGE_SERVICE__HTTP_HOST" }}
{{- range $name := concat (keys (.Values.env | default dict)) (keys (.Values.secretEnv | default dict)) }}
{{- if has (upper $name) $derived }}
{{- fail (printf "%s would override the config the chart reads its grace period and port from: set it in config instead" $name) }}
{{- end }}
{{- end }}
{{- with .Values.podDisruptionBudget }}
{{- if and .enabled (eq (kindIs "invalid" .maxUnavailable) (kindIs "invalid" .minAvailable)) }}
{{- fail "podDisruptionBudget: set one of maxUnavailable and minAvailable (and null the other)" }}
{{- end }}
{{- end }}
{{- if and .Values.existingSecretVersion (not .Values.existingSecret) }}
{{- fail "existingSecretVersion is set but existingSecret is not: it versions a Secret you manage (name it in existingSecret)" }}
{{- end }}
{{- $_ := include "kstage.httpPort" . }}
{{- end }}

{{/*
The brokers of the KEDA kafka triggers: keda.bootstrapServers, else the config's
kafka.bootstrap: a ${VAR} (or ${VAR:-default}) is read from the container's environment
by KEDA (bootstrapServersFromEnv), a host:port list is taken as it is.
*/}}
{{- define "kstage.kedaBrokers" -}}
{{- $bootstrap := toString ((.Values.config.kafka | default dict).bootstrap | default "embedded") }}
{{- $variable := `^\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}$` }}
{{- if .Values.keda.bootstrapServers }}
bootstrapServers: {{ .Values.keda.bootstrapServers | toString | quote }}
{{- else if regexMatch $variable $bootstrap }}
bootstrapServersFromEnv: {{ regexReplaceAll $variable $bootstrap "${1}" | quote }}
{{- else if or (contains "${" $bootstrap) (eq (lower $bootstrap) "embedded") }}
{{- fail (printf "keda: the brokers cannot be told from config.kafka.bootstrap %q: set keda.bootstrapServers" $bootstrap) }}
{{- else }}
bootstrapServers: {{ $bootstrap | quote }}
{{- end }}
{{- end }}
