{{/* Names: every object is <release>-trawl-<part> unless the release's name holds "trawl". */}}
{{- define "trawl.fullname" -}}
{{- if contains "trawl" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-trawl" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "trawl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: trawl
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "fetcher"). */}}
{{- define "trawl.selectorLabels" -}}
app.kubernetes.io/name: trawl
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "trawl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "trawl.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "trawl.image" -}}
{{- $tag := default .root.Chart.AppVersion .root.Values.image.tag -}}
{{- with index .root.Values .service -}}{{- $tag = default $tag .imageTag -}}{{- end -}}
{{- printf "%s%s:%s" .root.Values.image.prefix .service $tag -}}
{{- end -}}

{{- define "trawl.connectionSecret" -}}
{{- default (printf "%s-connection" (include "trawl.fullname" .)) .Values.connection.existingSecret -}}
{{- end -}}

{{- define "trawl.siteSecret" -}}
{{- default (printf "%s-site-secrets" (include "trawl.fullname" .)) .Values.siteSecrets.existingSecret -}}
{{- end -}}

{{/* The stores' passwords: the value given, else the one a previous release stored, else a new one. */}}
{{- define "trawl.storePassword" -}}
{{- $root := .root -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" $root.Release.Namespace (printf "%s-stores" (include "trawl.fullname" $root)) -}}
{{- if and $old $old.data (hasKey $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}
