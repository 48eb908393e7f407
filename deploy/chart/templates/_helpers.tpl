{{/* Object names: fixed (kai-pod-grouper), like deploy/rbac.yaml, so the rendered manifests and the chart agree. */}}
{{- define "grouper.name" -}}kai-pod-grouper{{- end }}

{{- define "grouper.labels" -}}
app.kubernetes.io/name: kai-pod-grouper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "grouper.selectorLabels" -}}
app.kubernetes.io/name: kai-pod-grouper
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The namespace of the leader-election Lease (and its Role). */}}
{{- define "grouper.leaseNamespace" -}}
{{- .Values.args.leaderElectionNamespace | default .Release.Namespace -}}
{{- end }}

{{/* The namespace of the optional defaults ConfigMap (and its Role). */}}
{{- define "grouper.defaultsNamespace" -}}
{{- .Values.args.defaultPrioritiesConfigmapNamespace | default .Release.Namespace -}}
{{- end }}

{{/* --extra-owner-kinds: args.extraOwnerKinds plus the kinds of .Values.extraOwnerKinds (Kind.group). */}}
{{- define "grouper.extraOwnerKinds" -}}
{{- $kinds := list -}}
{{- with .Values.args.extraOwnerKinds }}{{ $kinds = append $kinds . }}{{ end -}}
{{- range .Values.extraOwnerKinds -}}
{{- $kinds = append $kinds (ternary .kind (printf "%s.%s" .kind .group) (empty .group)) -}}
{{- end -}}
{{- join "," $kinds -}}
{{- end }}

{{/*
The container args: every non-null entry of .Values.args as --kebab-case=value (sorted by name), with the
values the chart derives from the rest of the release; then extraArgs.
*/}}
{{- define "grouper.args" -}}
{{- $args := deepCopy .Values.args -}}
{{- $_ := set $args "leaderElect" (ternary true (.Values.args.leaderElect | default false) (gt (int .Values.replicas) 1)) -}}
{{- $_ = set $args "leaderElectionNamespace" (include "grouper.leaseNamespace" .) -}}
{{- if .Values.args.defaultPrioritiesConfigmapName -}}
{{- $_ = set $args "defaultPrioritiesConfigmapNamespace" (include "grouper.defaultsNamespace" .) -}}
{{- end -}}
{{- if kindIs "invalid" .Values.args.httpBindAddress -}}
{{- $_ = set $args "httpBindAddress" (printf "0.0.0.0:%d" (int .Values.service.port)) -}}
{{- end -}}
{{- if kindIs "invalid" .Values.args.identity -}}
{{- $_ = set $args "identity" "$(POD_NAME)" -}}
{{- end -}}
{{- if .Values.webhook.enabled -}}
{{- $_ = set $args "webhookBindAddress" (printf "0.0.0.0:%d" (int .Values.webhook.port)) -}}
{{- $_ = set $args "webhookCertFile" (printf "%s/tls.crt" (include "grouper.webhookTlsDir" .)) -}}
{{- $_ = set $args "webhookKeyFile" (printf "%s/tls.key" (include "grouper.webhookTlsDir" .)) -}}
{{- if .Values.webhook.clientCA -}}
{{- $_ = set $args "webhookClientCa" (printf "%s/ca.crt" (include "grouper.webhookClientCaDir" .)) -}}
{{- else if .Values.webhook.allowUnauthenticated -}}
{{- $_ = set $args "webhookAllowUnauthenticated" true -}}
{{- else -}}
{{- fail "webhook.enabled needs webhook.clientCA (the CA of the API server's webhook client certificate), or webhook.allowUnauthenticated=true to answer anyone who reaches the port" -}}
{{- end -}}
{{- end -}}
{{- $extra := include "grouper.extraOwnerKinds" . -}}
{{- if $extra }}{{ $_ = set $args "extraOwnerKinds" $extra }}{{ else }}{{ $_ = unset $args "extraOwnerKinds" }}{{ end -}}
{{- range $key := keys $args | sortAlpha }}
{{- $v := get $args $key }}
{{- if not (kindIs "invalid" $v) }}
- {{ printf "--%s=%v" (kebabcase $key) $v | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* Where the webhook's serving certificate (tls.crt, tls.key) and the client CA are mounted. */}}
{{- define "grouper.webhookTlsDir" -}}/etc/kai-pod-grouper/webhook-tls{{- end }}
{{- define "grouper.webhookClientCaDir" -}}/etc/kai-pod-grouper/webhook-client-ca{{- end }}
